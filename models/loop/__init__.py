"""The loop: one MAPE-K iteration (`iteration`) and one module per phase, in the order a run flows through them:
`monitor`, the operator's `messages`, `analyze` (with the observation's `validation`), `verify`, `plan`, `execute`.

Prefect-free: the `mape-k` flow runs the phases as Prefect tasks (`daedalus.tasks`), the simulator and the benchmarks
as the plain functions (`iteration.PLAIN`). Either way the same code decides.
"""
