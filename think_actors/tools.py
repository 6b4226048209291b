"""Tools: ``@tool`` turns a function or method into a ``Tool`` whose JSON schema comes from its signature.

A tool runs in the agent's process by default. ``@tool(num_cpus=..., num_gpus=..., resources=...)`` marks it
to run as a Ray task with those resources (in-process agents run it locally); ``actor_tool`` (runtime) and
``agent_tool`` (runtime) give tools whose execution happens on other actors. Execute-less tools (client
tools) end the step loop with their call waiting for a result.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, create_model

from .errors import ConfigurationError
from .identity import Principal
from .run_account import RunTicket

__all__ = ["ClientToolSchema", "Tool", "ToolContext", "ToolInputError", "class_tools", "tool"]


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolContext:
    """Given to a tool that declares a parameter annotated ``ToolContext`` (left out of its schema)."""

    tool_call_id: str
    tool_name: str
    request_id: str
    agent: Any
    messages: list[dict[str, Any]]
    emit: Callable[[Any], None] | None = None
    """Puts a chunk into the turn's stream (not persisted unless it is a part of this tool's result)."""
    run: RunTicket | None = None
    """The run this turn belongs to, when it has ``RunLimits``: its id, this agent's depth, the time left
    (``run.remaining_s()``) and what the run used so far (``await run.account.usage()``)."""
    principal: Principal | None = None
    """Who sent the turn (``Think.active_principal``): check it before acting for them."""


RUN_CONTEXT = "run_context"  # a tool parameter of this name gets ``run_facts``: the model never sees it


def run_facts(context: ToolContext) -> dict[str, Any]:
    """What a tool's ``run_context`` parameter gets: the run of the call (``RunTicket.facts``: its id, the agent's
    depth, the seconds before its deadline), or ``{}`` for a turn without ``RunLimits``."""
    return context.run.facts() if context.run is not None else {}


class ToolInputError(Exception):
    """The model's input does not match the tool's schema (reported to the model as a tool input error)."""


class ClientToolSchema(BaseModel):
    """A tool the caller executes (browser, RPC client): ``{name, description?, parameters?}``."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The description (everything before ``Args:``) and per-argument descriptions of a Google docstring."""
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    description: list[str] = []
    args: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                current = match.group(1)
                args[current] = match.group(2).strip()
            elif line.strip() and current and line.startswith("        "):
                args[current] += " " + line.strip()
            elif line.strip() and not line.startswith(" "):
                in_args = False  # another section starts
        elif not in_args:
            description.append(line)
    return "\n".join(description).strip(), args


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


# Built once: a TypeAdapter costs tens of microseconds to build, and every tool result goes through here.
_ANY: TypeAdapter[Any] = TypeAdapter(Any)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, str | int | float | bool | type(None)):
        return value
    return _ANY.dump_python(value, mode="json")


class Tool:
    """A tool the model can call: a name, a description, a JSON schema for its input and (usually) an execute.

    Args:
        name: The name the model calls it by.
        description: What it does, for the model.
        input_schema: JSON schema of its input object.
        fn: The function to run, or None for a tool the caller executes (a client tool).
        validator: A pydantic model validating the input (derived from ``fn``'s signature by ``@tool``).
        remote: Ray task options (``num_cpus``, ``num_gpus``, ``resources``) to run it as a task, else None.
        needs_approval: Whether a person must approve each call before it runs: a bool, or a predicate of the
            call's input (sync or async) saying whether this call needs it.
        idempotent: Whether running a call twice has the effect of running it once. After a crash, a call that
            started but did not finish is re-run only when its tool is idempotent (see ``reconcile_tool_call``).
    """

    def __init__(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        fn: Callable[..., Any] | None = None,
        *,
        validator: type[BaseModel] | None = None,
        context_param: str | None = None,
        remote: dict[str, Any] | None = None,
        needs_approval: bool | Callable[[Any], Any] = False,
        executor: Callable[..., Any] | None = None,
        idempotent: bool = False,
    ):
        self.name = name
        self.description = description
        self.input_schema = input_schema
        self.fn = fn
        self.validator = validator
        self.context_param = context_param
        self.remote = remote
        self.needs_approval = needs_approval
        self.executor = executor
        self.idempotent = idempotent
        self.streaming = fn is not None and inspect.isasyncgenfunction(fn)
        # A function with a parameter named run_context gets the run its call belongs to (ToolContext.run's facts).
        self.run_context = fn is not None and RUN_CONTEXT in inspect.signature(fn).parameters
        self._is_method = fn is not None and next(iter(inspect.signature(fn).parameters), "") == "self"

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    @property
    def executable(self) -> bool:
        """False for a tool the caller must execute (its call ends the step loop without a result)."""
        return self.fn is not None or self.executor is not None

    def spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.input_schema},
        }

    def bind(self, owner: Any) -> Tool:
        """This tool with ``self`` bound to ``owner`` when its function is a method; else itself."""
        if not self._is_method or self.fn is None:
            return self
        bound = type(self).__new__(type(self))  # a subclass (an action) stays one
        bound.__dict__.update(self.__dict__)
        bound.fn = self.fn.__get__(owner)
        bound._is_method = False
        return bound

    def __get__(self, owner: Any, objtype: Any = None) -> Any:
        # Accessed on an instance, a method tool reads as the bound method so ``self.search(...)`` works.
        if owner is None or not self._is_method or self.fn is None:
            return self
        return self.fn.__get__(owner)

    def validate_input(self, raw: Any) -> Any:
        """The input as the function will receive it; raise ToolInputError when it does not fit the schema."""
        if not isinstance(raw, dict):
            raise ToolInputError(f"Invalid input for tool {self.name!r}: expected a JSON object, got {raw!r}")
        if self.validator is None:
            return raw
        try:
            return self.validator.model_validate(raw)
        except ValidationError as err:
            raise ToolInputError(f"Invalid input for tool {self.name!r}: {_short_errors(err)}") from None

    def call(self, validated: Any, context: ToolContext) -> Any:
        """Start the function: returns an awaitable, an async iterator (streaming) or a value."""
        if self.fn is None:
            raise RuntimeError(f"tool {self.name!r} has no function")
        if isinstance(validated, BaseModel) and self.validator is not None:
            kwargs = {name: getattr(validated, name) for name in self.validator.model_fields}
        else:
            kwargs = dict(validated)
        if self.context_param:
            kwargs[self.context_param] = context
        if self.run_context:
            kwargs[RUN_CONTEXT] = run_facts(context)
        if inspect.iscoroutinefunction(self.fn) or self.streaming:
            return self.fn(**kwargs)
        return asyncio.to_thread(self.fn, **kwargs)  # a sync tool must not block the agent's event loop

    @staticmethod
    async def resolve(result: Any) -> Any:
        """Await ``result``; an async iterable that is not a streaming tool collapses to its last value."""
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, AsyncIterator) or hasattr(result, "__aiter__"):
            last = None
            async for item in result:
                last = item
            result = last
        return _jsonable(result)


_CLASS_TOOLS: weakref.WeakKeyDictionary[type, dict[str, Tool]] = weakref.WeakKeyDictionary()


def class_tools(cls: type) -> dict[str, Tool]:
    """The ``@tool`` attributes of ``cls`` and its bases by name (a subclass's definition wins)."""
    found = _CLASS_TOOLS.get(cls)
    if found is None:
        found = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                if isinstance(value, Tool):
                    found[value.name] = value
        _CLASS_TOOLS[cls] = found
    return found


def _short_errors(err: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in err.errors())


def input_validator(
    name: str,
    parameters: Iterable[inspect.Parameter],
    hints: dict[str, Any] | None = None,
    arg_docs: dict[str, str] | None = None,
) -> tuple[type[BaseModel], str | None]:
    """A strict pydantic model for a tool's input from its parameters, and the ToolContext parameter, if any.

    ``self``, ``*args``/``**kwargs`` and private parameters with defaults (such as Ray's ``_ray_trace_ctx``) are
    left out of the schema.
    """
    hints = hints or {}
    arg_docs = arg_docs or {}
    fields: dict[str, Any] = {}
    context_param = None
    for param in parameters:
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name.startswith("_") and param.default is not inspect.Parameter.empty:
            continue
        if param.name == RUN_CONTEXT:  # filled at the call: the run it belongs to
            continue
        annotation = hints.get(param.name, param.annotation)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=arg_docs.get(param.name)))
    model_name = "".join(part.capitalize() for part in name.split("_")) + "Input"
    validator: type[BaseModel] = create_model(model_name, __config__=ConfigDict(extra="forbid"), **fields)
    return validator, context_param


def _tool_from_function(
    fn: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    remote: dict[str, Any] | None,
    needs_approval: bool | Callable[[Any], Any],
    idempotent: bool = False,
) -> Tool:
    from_doc, arg_docs = _parse_docstring(fn.__doc__)
    _check_annotated(fn, name or fn.__name__)
    try:
        hints = get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {}
    validator, context_param = input_validator(
        name or fn.__name__, inspect.signature(fn).parameters.values(), hints, arg_docs
    )
    schema = _strip_titles(validator.model_json_schema())
    schema.setdefault("properties", {})
    return Tool(
        name or fn.__name__,
        description if description is not None else from_doc,
        schema,
        fn,
        validator=validator,
        context_param=context_param,
        remote=remote,
        needs_approval=needs_approval,
        idempotent=idempotent,
    )


def _check_annotated(fn: Callable[..., Any], tool_name: str) -> None:
    """Refuse a parameter without a type: its schema would accept anything, and the model is told nothing."""
    for param in inspect.signature(fn).parameters.values():
        if param.name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name.startswith("_") and param.default is not inspect.Parameter.empty:
            continue  # left out of the schema
        if param.name == RUN_CONTEXT:
            continue  # filled at the call, never in the schema: it needs no type
        if param.annotation is inspect.Parameter.empty:
            raise ConfigurationError(
                f"tool {tool_name!r}: parameter {param.name!r} has no type annotation; annotate it (e.g. "
                f"`{param.name}: str`) so the model is told what to pass and its input is checked, or use "
                f"`{param.name}: Any` to accept anything"
            )


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    needs_approval: bool | Callable[[Any], Any] = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    resources: dict[str, float] | None = None,
    needs_approval: bool | Callable[[Any], Any] = False,
    idempotent: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a tool of a function or method; its docstring describes it and its signature gives the schema.

    Use bare (``@tool``) or with options (``@tool(num_cpus=2)``). An ``async def`` generator streams
    preliminary outputs (each yield) and its last yield is the result. Resource options run the tool as a
    Ray task with those resources when the agent runs on Ray. ``idempotent=True`` lets crash recovery re-run a
    call whose outcome is unknown (it started, and the process died before it finished).
    """
    remote = None
    if num_cpus is not None or num_gpus is not None or resources:
        remote = {k: v for k, v in (("num_cpus", num_cpus), ("num_gpus", num_gpus), ("resources", resources)) if v}
        remote.setdefault("num_cpus", num_cpus or 0)

    def wrap(f: Callable[..., Any]) -> Tool:
        return _tool_from_function(
            f, name=name, description=description, remote=remote, needs_approval=needs_approval, idempotent=idempotent
        )

    return wrap(fn) if fn is not None else wrap


def client_tool(schema: ClientToolSchema) -> Tool:
    """An execute-less tool from a client's schema: its call waits for the caller's result."""
    return Tool(schema.name, schema.description or "", schema.parameters or {"type": "object", "properties": {}})


def check_tool_names(agent: str, tools: Sequence[Tool]) -> None:
    """Two tools of one agent under one name would leave the model only the last: refuse, naming it."""
    seen: set[str] = set()
    for t in tools:
        name = getattr(t, "name", None)
        if name in seen:
            raise ConfigurationError(
                f"two tools of {agent} are named {name!r}, and the model would see only the last: give one a name "
                f"of its own (e.g. ta.agent_tool(Child, name='{name}_2', ...) or @ta.tool(name=...))"
            )
        if isinstance(name, str):
            seen.add(name)


def client_tools_of(schemas: Sequence[ClientToolSchema | dict[str, Any]] | None, executor: Any) -> list[Tool]:
    if not schemas:
        return []
    tools = []
    for schema in schemas:
        parsed = schema if isinstance(schema, ClientToolSchema) else ClientToolSchema.model_validate(schema)
        t = client_tool(parsed)
        if executor is not None:
            t.executor = _client_executor(executor, parsed.name)
        tools.append(t)
    return tools


def _client_executor(executor: Any, name: str) -> Any:
    async def run(value: Any, context: ToolContext) -> Any:
        result = executor(name, value, context.tool_call_id)
        if hasattr(result, "__await__"):
            result = await result
        return result

    return run
