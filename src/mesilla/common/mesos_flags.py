"""The flag names of Mesos 1.11's master and agent (`src/master/flags.cpp`,
`src/slave/flags.cpp`, `src/logging/flags.cpp`), so that a unit file or a
configuration written for Mesos starts Mesilla: a name Mesilla does not implement
is accepted with one warning that it has no effect, and a deprecated name
(`--slave_ping_timeout`) means its successor, as in Mesos.
"""

from __future__ import annotations

LOGGING = frozenset({
    "external_log_file", "initialize_driver_logging", "log_dir", "logbufsecs", "logging_level",
    "quiet",
})

MASTER = LOGGING | frozenset({
    "acls", "advertise_ip", "advertise_port", "agent_ping_timeout", "agent_removal_rate_limit",
    "agent_reregister_timeout", "allocation_interval", "allocator",
    "allocator_agent_recovery_factor", "allocator_recovery_timeout", "authenticate_agents",
    "authenticate_frameworks", "authenticate_http_frameworks", "authenticate_http_readonly",
    "authenticate_http_readwrite", "authentication_v0_timeout", "authenticators",
    "authorizers", "cluster", "credentials", "domain", "fair_sharing_excluded_resource_names",
    "filter_gpu_resources", "firewall_rules", "framework_sorter", "hooks", "hostname",
    "hostname_lookup", "http_authenticators", "http_framework_authenticators", "ip",
    "ip_discovery_command", "log_auto_initialize", "master_contender", "master_detector",
    "max_agent_ping_timeouts", "max_completed_frameworks", "max_completed_tasks_per_framework",
    "max_executors_per_agent", "max_operator_event_stream_subscribers",
    "max_unreachable_tasks_per_framework", "memory_profiling", "min_allocatable_resources",
    "modules", "offer_constraints_re2_max_mem", "offer_constraints_re2_max_program_size",
    "offer_timeout", "port", "publish_per_framework_metrics", "quorum", "rate_limits",
    "recovery_agent_removal_limit", "registry", "registry_fetch_timeout",
    "registry_gc_interval", "registry_max_agent_age", "registry_max_agent_count",
    "registry_store_timeout", "registry_strict", "require_agent_domain", "role_sorter",
    "roles", "root_submissions", "version", "webui_dir", "weights", "whitelist", "work_dir",
    "zk", "zk_session_timeout",
})

AGENT = LOGGING | frozenset({
    "acls", "advertise_ip", "advertise_port", "agent_features", "agent_subsystems",
    "allowed_devices", "appc_simple_discovery_uri_prefix", "appc_store_dir", "attributes",
    "authenticate_http_executors", "authenticate_http_readonly", "authenticate_http_readwrite",
    "authenticatee", "authentication_backoff_factor", "authentication_timeout_max",
    "authentication_timeout_min", "authorizer", "bounding_capabilities",
    "cgroups_cpu_enable_pids_and_tids_count", "cgroups_destroy_timeout", "cgroups_enable_cfs",
    "cgroups_hierarchy", "cgroups_limit_swap", "cgroups_net_cls_primary_handle",
    "cgroups_net_cls_secondary_handles", "cgroups_root", "check_agent_port_range_only",
    "container_disk_watch_interval", "container_logger", "container_ports_isolated_range",
    "container_ports_watch_interval", "containerizers", "credential", "csi_plugin_config_dir",
    "default_container_dns", "default_container_info", "default_container_shm_size",
    "default_role", "disallow_sharing_agent_ipc_namespace",
    "disallow_sharing_agent_pid_namespace", "disk_profile_adaptor", "disk_watch_interval",
    "docker", "docker_config", "docker_ignore_runtime", "docker_kill_orphans",
    "docker_mesos_image", "docker_registry", "docker_remove_delay", "docker_socket",
    "docker_stop_timeout", "docker_store_dir", "docker_volume_checkpoint_dir",
    "docker_volume_chown", "domain", "domain_socket_location", "effective_capabilities",
    "egress_flow_classifier_parent", "egress_rate_limit_per_container",
    "egress_unique_flow_per_container", "enforce_container_disk_quota",
    "enforce_container_ports", "ephemeral_ports_per_container", "eth0_name",
    "executor_environment_variables", "executor_registration_timeout",
    "executor_reregistration_retry_interval", "executor_reregistration_timeout",
    "executor_shutdown_grace_period", "fetcher_cache_dir", "fetcher_cache_size",
    "fetcher_stall_timeout", "firewall_rules", "frameworks_home", "gc_delay",
    "gc_disk_headroom", "gc_non_executor_container_sandboxes", "hadoop_home", "hooks",
    "host_path_volume_force_creation", "hostname", "hostname_lookup", "http_authenticators",
    "http_command_executor", "http_credentials", "http_executor_domain_sockets",
    "http_heartbeat_interval", "image_gc_config", "image_providers",
    "image_provisioner_backend", "ip", "ip6", "ip6_discovery_command", "ip_discovery_command",
    "isolation", "jwt_secret_key", "launcher", "lo_name", "master", "master_detector",
    "max_completed_executors_per_framework", "memory_profiling", "modules",
    "network_cni_config_dir", "network_cni_metrics", "network_cni_plugins_dir",
    "network_cni_root_dir_persist", "network_enable_snmp_statistics",
    "network_enable_socket_statistics_details", "network_enable_socket_statistics_summary",
    "nvidia_gpu_devices", "oversubscribed_resources_interval", "perf_duration", "perf_events",
    "perf_interval", "port", "qos_controller", "qos_correction_interval_min",
    "reconfiguration_policy", "recover", "recovery_timeout", "registration_backoff_factor",
    "resource_estimator", "resource_provider_config_dir", "resources",
    "revocable_cpu_low_priority", "runtime_dir", "sandbox_directory", "seccomp_config_dir",
    "seccomp_profile_name", "secret_resolver", "strict", "switch_user",
    "systemd_enable_support", "systemd_runtime_directory", "version", "volume_gid_range",
    "work_dir", "xfs_kill_containers", "xfs_project_range", "zk_session_timeout",
})

# Old names Mesos still reads, with the flag each now means.
DEPRECATED = {
    "authenticate": "authenticate_frameworks",
    "authenticate_http": "authenticate_http_readwrite",
    "allowed_capabilities": "effective_capabilities",
    "authenticate_slaves": "authenticate_agents",
    "executor_secret_key": "jwt_secret_key",
    "max_executors_per_slave": "max_executors_per_agent",
    "max_slave_ping_timeouts": "max_agent_ping_timeouts",
    "recovery_slave_removal_limit": "recovery_agent_removal_limit",
    "slave_ping_timeout": "agent_ping_timeout",
    "slave_removal_rate_limit": "agent_removal_rate_limit",
    "slave_reregister_timeout": "agent_reregister_timeout",
    "slave_subsystems": "agent_subsystems",
    "user_sorter": "role_sorter",
}

# Without effect, these would leave a daemon open that its operator meant to secure:
# given (other than false), the daemon refuses to start instead of warning.
UNSAFE_TO_IGNORE = frozenset({
    "acls", "authenticate_agents", "authenticate_frameworks", "authenticate_http_executors",
    "authenticate_http_frameworks", "authenticate_http_readonly", "authenticate_http_readwrite",
    "authorizer", "authorizers", "credential", "credentials",
    "http_authenticators", "http_credentials", "http_framework_authenticators",
    "jwt_secret_key", "secret_resolver",
})
