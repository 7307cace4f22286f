"""The cgroups isolators (cgroups/cpu, cgroups/mem, cgroups/pids), one controller each."""
