"""The traced agent's conversation written with LangChain (issue 37: the OpenInference-for-LangChain producer).

`ChatOpenAI` (langchain-openai) with `bind_tools` over `@tool` tools that wrap the same local functions as agent.py,
against the same OpenAI-compatible endpoint (OPENAI_BASE_URL), in a manual loop: invoke the model, run each tool call
(`tool.invoke(call)` answers a ToolMessage), until the model answers without a tool call. The loop runs as one
runnable (`weather-agent`), so the trace has a root span enclosing the model and tool spans. Traced by
openinference-instrumentation-langchain; the spans go to a FILE as OTLP (agent.write_otlp), never to the network.

A tool that raises is reported to LangChain's callbacks (the TOOL span ends in error) and the model is told
`{"error": "<tool> failed"}`, as agent.py tells it.

Run:  python langchain_agent.py --otlp-json F [--otlp-protobuf F] ["task"]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agent


def run(task: str) -> str | None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_forecast(city: str) -> dict[str, Any]:
        """Tomorrow's forecast for a city."""
        return agent.get_forecast(city)

    @tool
    def list_alerts(region: str) -> dict[str, Any]:
        """The active weather alerts of a region."""
        return agent.list_alerts(region)

    @tool
    def send_alert(region: str, text: str) -> dict[str, Any]:
        """Send a weather alert to everyone in a region (it cannot be taken back)."""
        return agent.send_alert(region, text)

    tools = {t.name: t for t in (get_forecast, list_alerts, send_alert)}
    model = ChatOpenAI(model=agent.MODEL, temperature=0, max_retries=0).bind_tools(list(tools.values()))

    def loop(task: str) -> str | None:
        messages: list[Any] = [SystemMessage(agent.SYSTEM), HumanMessage(task)]
        for _turn in range(agent.MAX_TURNS):
            reply = model.invoke(messages)
            assert isinstance(reply, AIMessage)
            messages.append(reply)
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                try:
                    messages.append(tools[call["name"]].invoke(call))
                except Exception:
                    messages.append(ToolMessage(agent.failed(call["name"]), tool_call_id=call["id"]))
        return None

    return RunnableLambda(loop, name=agent.AGENT_NAME).invoke(task)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", nargs="?", default=agent.DEFAULT_TASK)
    parser.add_argument("--otlp-json")
    parser.add_argument("--otlp-protobuf")
    args = parser.parse_args(argv)
    if not (args.otlp_json or args.otlp_protobuf):
        parser.error("give --otlp-json or --otlp-protobuf")
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": agent.AGENT_NAME + "-langchain"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    answer = run(args.task)
    provider.force_flush()
    agent.write_otlp(exporter.get_finished_spans(), args.otlp_json, args.otlp_protobuf)
    print(f"langchain agent: done: {answer}", file=sys.stderr)
    return 0 if answer is not None else 2


if __name__ == "__main__":
    sys.exit(main())
