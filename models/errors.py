"""The project's errors, in one place.

    DaedalusError
    ├── ConfigurationError   a jobs file, option or workload file is wrong: names the file, job and field
    ├── WorkloadError        a workload trace cannot be read: names the file and line
    ├── KnowledgeError       a stored knowledge version is corrupt or of an unknown schema
    ├── ConnectorError       Prometheus, Kubernetes or the store did not answer as expected
    ├── ValidationError      data failed a quality check; the loop holds instead of acting
    └── Refused              an operator's request that cannot be applied: says why and what would be accepted
"""


class DaedalusError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigurationError(DaedalusError):
    """Bad configuration: fail fast at load time, naming file, job and field."""


class WorkloadError(ConfigurationError):
    """A workload file is empty, malformed or too short: names the file and line."""


class KnowledgeError(DaedalusError):
    """A knowledge version cannot be read (checksum, truncation, schema)."""


class ConnectorError(DaedalusError):
    """An outside system (Prometheus, Kubernetes, storage) failed or answered nonsense."""


class ValidationError(DaedalusError):
    """Metric data failed validation; nothing may be scaled on it."""


class Refused(DaedalusError):
    """An operator's request that cannot be applied; the message says why and what would be accepted."""
