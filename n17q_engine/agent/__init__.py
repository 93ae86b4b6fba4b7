"""Your own agent as a replay's decider (issue 18, DESIGN §10 "Agents in replays"). See docs/agents.md.

- `spec`: a registered agent: a folder, its entry command, the digest of its files (pinned), its Python
  environment (`AgentSpec`, `folder_digest`).
- `model`: model fixtures: the pseudo tool `model.chat` and its contract (`MODEL_CONTRACT`, `model_fixture`).
- `bridge`: the two endpoints the agent sees inside the sandbox: the scenario's tools as an MCP server (the `mcp`
  SDK, stdio on the agent's own stdin/stdout) and `POST /v1/chat/completions` on the namespace's own address.
- `decider`: the decider that asks the agent, step by step, what to do (`agent_decider`).
- `entry`: the sandbox entry (`n17q_engine.agent.entry:sandbox_main`) and the launcher (`run_agent_replay`).

Django-free and free of network clients by its own imports (the `mcp` SDK and asyncio bring theirs).
"""
