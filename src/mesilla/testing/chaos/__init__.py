"""Chaos under load (issue #15): a seeded fault schedule, a history of what each
framework saw, and a checker of Mesos's guarantees over it.

`schedule` makes the faults from a seed and shrinks a failing schedule;
`history` records every call and event of the load's frameworks; `load` is
the workload; `inject` applies faults to a `processes.Cluster`; `check`
judges the history and the quiet cluster; `run` puts them together.
"""
