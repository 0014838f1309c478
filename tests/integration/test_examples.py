"""Issue 13, point 2: each example's server entrypoint runs offline, as under ``console``.

The examples are LiveKit 1.8 servers (``AgentServer`` + ``@server.rtc_session``, a VAD
prewarm, ``cli.run_app(server)``). Each test imports one, checks what its server
registers, and runs its entrypoint in LiveKit's own fake job context (what ``console``
runs: no server, no SIP, empty job metadata) on a simulated call: the entrypoint's
session is the simulated one (scripted models instead of OpenAI's, the only part
replaced), the rest is the example's own code — policy, agent, ``attach`` with its
``end_call``, the trace writer, the outbound dial's console answer. Each call must get to
the greeting's audio, and its trace file must load with the trace reader.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
from pathlib import Path
from types import ModuleType

import pytest
from aiohttp import web
from livekit import api
from livekit.agents import AgentServer, AgentSession, JobProcess
from livekit.agents.ipc.mock_room import create_mock_room
from livekit.agents.testing import fake_job_context
from livekit.plugins import openai, silero

from turnfsm import Trace, TurnController
from turnfsm.adapters.livekit import TurnAgent, adapter_for, attach
from turnfsm.adapters.livekit.job import CONSOLE_NUMBER, phone_number_to_dial
from turnfsm.adapters.sim import (
    CallScript,
    PacedAudioOutput,
    SimulatedCall,
    UserLine,
    load_silero_vad,
)
from turnfsm.adapters.sim.job import ConsoleSession, run_entrypoint
from turnfsm.adapters.sim.realtime import RealtimeScript, RealtimeTestServer

from support.tone import ToneMicrophone

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"turnfsm_example_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def traces(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Offline: no LiveKit server, a dummy OpenAI key; the examples' trace folder."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.setenv("TRACE_DIR", str(tmp_path / "traces"))
    for name in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "traces"


def check_server(module: ModuleType, entrypoint: str, agent_name: str) -> None:
    server = module.server
    assert isinstance(server, AgentServer)
    assert server._entrypoint_fnc is getattr(module, entrypoint)  # what @rtc_session set
    assert server._agent_name == agent_name
    assert server.setup_fnc is module.prewarm
    assert inspect.iscoroutinefunction(server._entrypoint_fnc)


def check_real_session(module: ModuleType) -> None:
    """The example's own session builder: real plugins, the prewarmed VAD, no network."""
    proc = JobProcess(executor_type=None, user_arguments=None, http_proxy=None)  # type: ignore[arg-type]
    module.prewarm(proc)
    assert isinstance(proc.userdata["vad"], silero.VAD)
    session = module.build_session(proc)
    assert isinstance(session, AgentSession)
    assert isinstance(session.llm, openai.LLM)
    assert session.vad is proc.userdata["vad"]
    # the example's session and policy pass attach's checks
    attach(session, TurnController(module.build_policy()), end_call=lambda reason: None).detach()


async def run_console_call(
    module: ModuleType, entrypoint: str, script: CallScript, traces: Path
) -> tuple[Trace, SimulatedCall]:
    call = SimulatedCall(script)
    module.build_session = lambda proc: call.build_session(ConsoleSession)
    async with run_entrypoint(getattr(module, entrypoint), call):
        adapter = adapter_for(call.session)
        assert adapter is not None
        assert isinstance(call.session.current_agent, TurnAgent)
        # the greeting's audio reaches the callee
        await call.wait_until(
            lambda: adapter.controller.state == "greeting" and bool(call.audio_output.segments),
            timeout=10,
        )
    (written,) = traces.glob("*.jsonl")
    return Trace.read(written), call


async def test_outbound_caller_answers_in_console_and_writes_its_trace(traces: Path) -> None:
    example = load_example("outbound_caller")
    check_server(example, "outbound_caller", "outbound-caller")
    check_real_session(example)
    script = CallScript([UserLine(0.3, "hello")])
    trace, call = await run_console_call(example, "outbound_caller", script, traces)
    path = [(step.before, step.event.name, step.after) for step in trace]
    assert ("ringing", "call_answered", "awaiting_user") in path  # the console's answer
    assert ("awaiting_user", "user_turn_committed", "greeting") in path
    ends = [step for step in path if step[1:] == ("call_ended", "ended")]
    assert len(ends) == 1  # written up to the session's close
    assert path[-1][2] == "ended"
    assert trace.policy.direction == "outbound"
    assert trace.policy.greeting == "[redacted]"  # the policy's text is not stored
    assert [m.text_content for m in call.messages("user")][:1] == ["Hello?"]


async def test_inbound_assistant_greets_in_console_and_writes_its_trace(traces: Path) -> None:
    example = load_example("inbound_assistant")
    check_server(example, "inbound_assistant", "inbound-assistant")
    check_real_session(example)
    assert [tool.id for tool in example.Receptionist().tools] == ["lookup_appointment"]
    trace, call = await run_console_call(example, "inbound_assistant", CallScript(), traces)
    path = [(step.before, step.event.name, step.after) for step in trace]
    assert path[0] == ("start", "session_started", "greeting")  # greets at once
    assert [step for step in path if step[1:] == ("call_ended", "ended")]
    assert trace.policy.max_tool_steps == 2
    assert call.audio_output.segments  # the greeting's audio reached the caller


async def test_realtime_agent_answers_in_console_and_writes_its_trace(traces: Path) -> None:
    """On the real OpenAI Realtime plugin against the local Realtime test server."""
    example = load_example("realtime_agent")
    assert example.server._entrypoint_fnc is example.realtime_agent
    assert example.server._agent_name == "realtime-agent"
    microphone, speaker = ToneMicrophone(), PacedAudioOutput(sample_rate=24000)
    async with RealtimeTestServer(RealtimeScript(default_text="Hi!")) as server:
        real_build_session = example.build_session

        def console_session() -> AgentSession:
            session = real_build_session(api_key="dummy", http_session=server.http_session())
            console = ConsoleSession(llm=session.llm, vad=None, aec_warmup_duration=None)
            console.input.audio, console.output.audio = microphone, speaker
            return console

        example.build_session = console_session
        with fake_job_context(room=create_mock_room()) as ctx:  # what console runs
            await example.realtime_agent(ctx)
            session = ctx.primary_session
            adapter = adapter_for(session)
            assert adapter is not None
            assert adapter.realtime is not None  # the realtime levers are in place
            assert adapter.controller.state == "awaiting_user"  # answered at once
            await session.aclose()
            await session.llm.aclose()
            await speaker.aclose()
    (written,) = traces.glob("*.jsonl")
    path = [(step.before, step.event.name, step.after) for step in Trace.read(written)]
    assert ("ringing", "call_answered", "awaiting_user") in path
    assert path[-1][2] == "ended"


class SipServer:
    """LiveKit's server API on localhost, over its real Twirp protocol: dialing fails the
    way a busy line does (SIP 486), deleting the room succeeds. Records every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, bytes]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> SipServer:
        app = web.Application()
        app.router.add_post("/twirp/{service}/{method}", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        self.requests.append((method, await request.read()))
        if method == "CreateSIPParticipant":
            error = {
                "code": "resource_exhausted",
                "msg": "call rejected",
                "meta": {"sip_status_code": "486", "sip_status": "Busy Here"},
            }
            return web.json_response(error, status=429)
        return web.Response(body=b"", content_type="application/protobuf")

    def sent(self, method: str) -> list[bytes]:
        return [body for name, body in self.requests if name == method]


async def test_outbound_caller_reports_a_busy_line_and_shuts_the_job_down(
    traces: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("SIP_OUTBOUND_TRUNK_ID", "ST_test")
    example = load_example("outbound_caller")
    call = SimulatedCall()
    example.build_session = lambda proc: call.build_session(ConsoleSession)
    shutdowns: list[str] = []
    async with SipServer() as sip:
        with fake_job_context(job_metadata='{"phone_number": "+15550199"}') as ctx:
            ctx._info.fake_job = False  # the job as a worker runs it: a real dial
            ctx._on_shutdown = shutdowns.append
            ctx.__dict__["api"] = api.LiveKitAPI(sip.url, "key", "secret" * 6)
            ctx.proc.userdata["vad"] = load_silero_vad()
            try:
                await example.outbound_caller(ctx)
                adapter = adapter_for(call.session)
                assert adapter is not None
                assert adapter.controller.state == "ended"
                assert adapter.controller.context.end_reason == "dial_failed"
            finally:
                await call.aclose()
                await ctx.api.aclose()
        (dialed,) = sip.sent("CreateSIPParticipant")
        request = api.CreateSIPParticipantRequest.FromString(dialed)
        assert (request.sip_call_to, request.sip_trunk_id) == ("+15550199", "ST_test")
        assert request.wait_until_answered
        assert request.ringing_timeout.seconds == 30
        assert len(sip.sent("DeleteRoom")) == 1  # the machine hung up: the room is deleted
    assert shutdowns == ["the call failed"]
    (failure,) = [r for r in caplog.records if r.getMessage() == "turnfsm: the call failed"]
    assert (failure.sip_status_code, failure.sip_status) == ("486", "Busy Here")  # type: ignore[attr-defined]
    caplog.clear()  # the one error this test expects, checked: not an adapter failure
    (written,) = traces.glob("*.jsonl")
    steps = list(Trace.read(written))
    assert [s.event.name for s in steps if s.after == "ended"][0] == "call_ended"


@pytest.mark.parametrize("metadata", ["", "{}", "not json", '{"phone_number": 5}'])
async def test_a_job_without_a_number_is_logged_and_shut_down(
    metadata: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Dispatched without ``--metadata '{"phone_number": ...}'``: no KeyError, no hang."""
    shutdowns: list[str] = []
    with fake_job_context(job_metadata=metadata) as ctx:
        assert phone_number_to_dial(ctx) == CONSOLE_NUMBER  # console: nothing is dialed
        ctx._info.fake_job = False  # the same job from a worker
        ctx._on_shutdown = shutdowns.append
        assert phone_number_to_dial(ctx) is None
    assert shutdowns == ["no phone number in the job metadata"]
    (logged,) = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert '--metadata \'{"phone_number": "+15550100"}\'' in logged.getMessage()
    caplog.clear()  # the one error this test expects, checked


@pytest.mark.parametrize("name", ["outbound_caller", "inbound_assistant", "realtime_agent"])
def test_each_example_runs_as_a_script(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python examples/X.py --help`` as its ``__main__`` block runs it: LiveKit's CLI on
    the example's server, with the ``console`` command."""
    example = load_example(name)
    main_block = (EXAMPLES / f"{name}.py").read_text().split('if __name__ == "__main__":')[1]
    assert main_block.strip() == "cli.run_app(server)"
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        example.cli.run_app(example.server)
    assert exit_.value.code in (0, None)
    assert "console" in capsys.readouterr().out
