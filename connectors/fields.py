"""What every connector's typed settings share: a strict model (unknown keys are errors), durations, Kubernetes
names, credentials read at use, and URLs made safe to print.

Durations accept seconds (`600`) or a unit (`600s`, `10m`, `1h`, `500ms`).
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from daedalus.models.errors import ConfigurationError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def seconds(value: Any) -> Any:
    """A duration string as seconds; anything else is left for the field's own type check."""
    if isinstance(value, str):
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"not a duration: {value!r} (use e.g. 600, 600s, 10m, 1h)")
        return float(m.group(1)) * _UNITS[m.group(2)]
    return value


Duration = Annotated[float, BeforeValidator(seconds), Field(gt=0)]
NonNegativeDuration = Annotated[float, BeforeValidator(seconds), Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def invalid(message: str) -> PydanticCustomError:
    """A validation error that reads exactly `message`: no "Value error," prefix, no `{}` templating of it."""
    return PydanticCustomError("daedalus", "{message}", {"message": message})


# --- Kubernetes names: they become URL path segments, so nothing else may pass -------------------------------

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
LABEL_RULE = ("a lowercase RFC 1123 label: lowercase letters, digits and '-', starting and ending with a letter "
              "or digit, at most 63 characters")
SUBDOMAIN_RULE = ("a lowercase RFC 1123 subdomain: RFC 1123 labels (lowercase letters, digits and '-', each "
                  "starting and ending with a letter or digit) joined by '.', at most 253 characters")


def label_problem(value: str) -> str | None:
    """Why `value` is not an RFC 1123 label (a Kubernetes namespace), or None."""
    if len(value) <= 63 and _LABEL.fullmatch(value):
        return None
    return f"{value!r} must be {LABEL_RULE}"


def subdomain_problem(value: str) -> str | None:
    """Why `value` is not an RFC 1123 subdomain (the name of a Deployment or a custom resource), or None."""
    if len(value) <= 253 and all(len(p) <= 63 and _LABEL.fullmatch(p) for p in value.split(".")):
        return None
    return f"{value!r} must be {SUBDOMAIN_RULE}"


def _checked(problem: Any) -> Any:
    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise invalid(found)
        return value

    return check


Rfc1123Label = Annotated[str, AfterValidator(_checked(label_problem))]
Rfc1123Subdomain = Annotated[str, AfterValidator(_checked(subdomain_problem))]


# --- credentials: named in the jobs file, read where they are used -----------------------------------------

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLOCK_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


def _env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise invalid(f"{value!r} is not an environment variable name (letters, digits and '_', not starting "
                      "with a digit)")
    return value


def _block_name(value: str) -> str:
    if not _BLOCK_NAME.fullmatch(value):
        raise invalid(f"{value!r} is not a Prefect block name (lowercase letters, digits and '-')")
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
BlockName = Annotated[str, AfterValidator(_block_name)]


def secret(job: str, field: str, env: str | None, block: str | None) -> str:
    """A credential's value, read now (when the connector is built, not when the jobs file loads): from the
    environment variable `env`, or else from the Prefect Secret block `block`. `field` names the setting
    without its `_env`/`_secret` suffix."""
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise ConfigurationError(f"job {job!r}: field {field}_env: the environment variable {env} is not set "
                                     "(or empty) where the loop runs: set it, e.g. from a Kubernetes Secret")
        return value
    from prefect.blocks.system import Secret  # only where a Secret block is named: Prefect loads slowly

    try:
        value = Secret.load(block, _sync=True).get()  # sync even if called inside a running event loop
    except Exception as exc:  # Prefect raises ValueError (no such block) or HTTP errors (API unreachable)
        raise ConfigurationError(
            f"job {job!r}: field {field}_secret: cannot load the Prefect Secret block {block!r} "
            f"({type(exc).__name__}: {redact(str(exc))}): create it (`prefect block create secret`) or fix the "
            "name") from exc
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"job {job!r}: field {field}_secret: the Prefect Secret block {block!r} must "
                                 f"hold a non-empty string, not {type(value).__name__}")
    return value


# --- URLs in messages ----------------------------------------------------------------------------------------

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]*@")  # to the last '@' before the host


def redact(text: str) -> str:
    """`text` (a URL, or a message with URLs in it) with every URL's user-info (`user:password@`) replaced by
    `***@`: whatever goes into a hold, a log, an artifact or a status file must not carry a credential."""
    return _USERINFO.sub(r"\1***@", text)
