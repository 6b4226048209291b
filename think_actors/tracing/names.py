"""Span attribute names: OpenTelemetry's GenAI semantic conventions, and ours under ``think_actors.``.

The ``gen_ai.*`` names are the conventions' (semantic-conventions 1.37, "Semantic conventions for generative AI
systems": agent spans, inference spans, execute_tool spans); ``error.type`` is the general convention. Ours carry
what the conventions have no name for: the request id a turn is known by everywhere else (logs, events, the
store), the agent's path under its parents, the Ray node, what started the turn, how it ended and what it cost.
Content attributes (``gen_ai.input.messages`` ...) are set only when message content capture is on.
"""

from __future__ import annotations

OPERATION = "gen_ai.operation.name"  # invoke_agent | chat | execute_tool
PROVIDER = "gen_ai.provider.name"  # the conventions' name of the model id's provider (openai, gcp.gemini, ...)
AGENT_NAME = "gen_ai.agent.name"  # the agent's class name
AGENT_ID = "gen_ai.agent.id"  # the agent's path: unique in its namespace
CONVERSATION_ID = "gen_ai.conversation.id"  # the agent's path: an agent is one conversation
REQUEST_MODEL = "gen_ai.request.model"  # the provider's model name, without litellm's provider prefix
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# Prompt tokens read from and written to the provider's prompt cache, both counted in gen_ai.usage.input_tokens (the
# conventions' experimental cache attributes, opentelemetry-js ATTR_GEN_AI_USAGE_CACHE_READ/CREATION_INPUT_TOKENS).
CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_TYPE = "gen_ai.tool.type"  # "function": every tool, a child agent too, is a function to the model
ERROR_TYPE = "error.type"
# Opt-in content (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT), JSON text.
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_RESULT = "gen_ai.tool.call.result"

# Who sent a turn (OpenTelemetry's user attributes): the principal a gateway authenticated.
USER_ID = "user.id"
USER_ROLES = "user.roles"

MODEL_ID = "think_actors.model"  # the model id as the agent gave it, litellm's prefix included
REQUEST_ID = "think_actors.request_id"
AGENT_PATH = "think_actors.agent.path"
NODE_ID = "think_actors.node_id"
CHANNEL = "think_actors.channel"  # where the turn came from: web, or a channel of the agent's class
TRIGGER = "think_actors.trigger"  # chat, save_messages, submission, recovery, continuation ...
STATUS = "think_actors.status"  # completed | aborted | skipped | error (turns); ok | error | blocked (tools)
COST = "think_actors.cost_usd"
# What the turn and every agent it started used together (the whole run, on the run's first turn).
TREE_INPUT_TOKENS = "think_actors.tree.input_tokens"
TREE_OUTPUT_TOKENS = "think_actors.tree.output_tokens"
TREE_REQUESTS = "think_actors.tree.requests"
TREE_AGENTS = "think_actors.tree.agents"
TREE_COST = "think_actors.tree.cost_usd"
RUN_LIMIT = "think_actors.run.limit"  # the RunLimits field that ended the turn
STEP = "think_actors.step"
STEPS = "think_actors.steps"
TOOLS_OFFERED = "think_actors.tools_offered"
SUBMISSIONS = "think_actors.submissions"
SUBMISSION_ID = "think_actors.submission_id"
# On a link: "recovers" (a recovered turn's, to the interrupted turn), "drains" (a drain's, to the submitter's span).
LINK_REASON = "think_actors.link"

# litellm's provider prefixes whose GenAI-conventions name differs (gen_ai.provider.name's well-known values);
# every other prefix is its own name.
PROVIDER_NAMES = {
    "azure": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "mistral": "mistral_ai",
    "xai": "x_ai",
    "watsonx": "ibm.watsonx.ai",
}


def model_names(model: str) -> tuple[str, str | None]:
    """``(the provider's model name, the conventions' provider name or None)`` of a litellm model id:
    ``openai/gpt-4o-mini`` is ``("gpt-4o-mini", "openai")``, ``gemini/gemini-2.0-flash`` names ``gcp.gemini``, and
    an id without a prefix (``gpt-4o``, a scripted model) is itself with no provider."""
    prefix, slash, name = model.partition("/")
    if not slash or not prefix or not name:
        return model, None
    return name, PROVIDER_NAMES.get(prefix, prefix)
