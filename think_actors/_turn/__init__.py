"""The private turn engine: queue, abort registry, transcript conversion, tool calls and the step loop."""
