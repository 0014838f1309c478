"""Issue 3, point 6: the examples build their session, agent and controller offline.

Both are LiveKit workers (``agents.cli.run_app(agents.WorkerOptions(...))``); the test
imports them, builds what their entrypoint builds — real OpenAI and silero plugins,
the policy, the controller — and attaches the controller, without connecting anywhere.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType

import pytest
from livekit import agents
from livekit.agents import AgentSession
from livekit.plugins import openai, silero

from turnfsm import TurnController
from turnfsm import events as ev
from turnfsm.adapters.livekit import TurnAgent, adapter_for, attach

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> ModuleType:
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"turnfsm_example_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _openai_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")


def _check_worker(module: ModuleType, agent_name: str) -> None:
    options = module.worker_options()
    assert isinstance(options, agents.WorkerOptions)
    assert options.entrypoint_fnc is module.entrypoint
    assert options.agent_name == agent_name
    assert list(inspect.signature(module.entrypoint).parameters) == ["ctx"]
    assert inspect.iscoroutinefunction(module.entrypoint)


def _check_session(session: AgentSession) -> None:
    assert isinstance(session.llm, openai.LLM)
    assert isinstance(session.stt, openai.STT)
    assert isinstance(session.tts, openai.TTS)
    assert isinstance(session.vad, silero.VAD)


async def test_outbound_caller_builds_offline() -> None:
    example = _load("outbound_caller")
    _check_worker(example, "outbound-caller")
    policy = example.build_policy()
    assert policy.direction == "outbound"
    assert policy.first_speaker == "user"  # waits for the callee's first words
    assert policy.greeting == example.GREETING
    controller = example.build_controller()
    assert isinstance(controller, TurnController)
    assert controller.state == "ringing"
    session = example.build_session()
    _check_session(session)
    agent = example.Caller()
    assert isinstance(agent, TurnAgent)
    adapter = attach(session, controller, end_call=lambda reason: None)
    assert adapter_for(session) is adapter
    adapter.detach()


async def test_inbound_assistant_builds_offline() -> None:
    example = _load("inbound_assistant")
    _check_worker(example, "inbound-assistant")
    policy = example.build_policy()
    assert policy.direction == "inbound"
    assert policy.first_speaker == "agent"
    assert policy.max_tool_steps == 2
    controller = example.build_controller()
    assert controller.state == "start"  # waits for the session, then greets at once
    greeter = example.build_controller()
    assert "start_greeting" in [e.name for e in greeter.handle(ev.SessionStarted(at=0.0))]
    assert greeter.state == "greeting"
    session = example.build_session()
    _check_session(session)
    agent = example.Receptionist()
    assert isinstance(agent, TurnAgent)
    assert [tool.id for tool in agent.tools] == ["lookup_appointment"]
    assert await agent.lookup_appointment(None, "+15550100") != "no appointment found"
    adapter = attach(session, controller)
    assert session.options.max_tool_steps >= policy.max_tool_steps
    adapter.detach()
