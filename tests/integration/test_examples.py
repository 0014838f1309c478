"""Issue 13, point 2: each example's server entrypoint runs offline, as under ``console``.

The examples are LiveKit 1.8 servers (``AgentServer`` + ``@server.rtc_session``, a VAD
prewarm, ``cli.run_app(server)``). Each test imports one, checks what its server
registers, and runs its entrypoint in LiveKit's own fake job context (what ``console``
runs: no server, no SIP, empty job metadata) on a simulated call: the entrypoint's
session is the simulated one (scripted models instead of OpenAI's, the only part
replaced), the rest is the example's own code — policy, agent, ``attach`` with its
``end_call``, the trace writer, the outbound dial's console answer. Each call must get to
the greeting's audio, and its trace file must load with the trace reader.

Issue 22: the examples are set up as LiveKit 1.8.9's own telephony examples are (the
caller's audio cleaned by ``noise_cancellation.BVCTelephony()`` when that plugin is
installed, LiveKit's turn detector, the models' usage logged when the call ends), teach
LiveKit's CLI (``lk agent console|dev|start``, not the deprecated ``python X.py console``
nor ``download-files``), and name every key they read in ``examples/.env.example``.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import logging
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aiohttp import web
from dotenv import dotenv_values
from livekit import api, rtc
from livekit.agents import AgentServer, AgentSession, JobProcess, inference
from livekit.agents.__main__ import _discover_server
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
from turnfsm.tools.metrics import call_metrics

from support.readme import readme_embed_block
from support.tone import ToneMicrophone

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NAMES = ["outbound_caller", "inbound_assistant", "realtime_agent"]
NOISE_CANCELLATION = "livekit.plugins.noise_cancellation"


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
    """Offline: no LiveKit server, a dummy OpenAI key; the examples' trace folder. A
    developer's ``.env`` (each example loads it on import) stays out."""
    monkeypatch.setenv("PYTHON_DOTENV_DISABLED", "1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.setenv("TRACE_DIR", str(tmp_path / "traces"))
    for name in ("LIVEKIT_URL", "LIVEKIT_API_KEY", "LIVEKIT_API_SECRET"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "traces"


@pytest.fixture
def telephony_noise_cancellation(monkeypatch: pytest.MonkeyPatch) -> rtc.NoiseCancellationOptions:
    """LiveKit Cloud's noise-cancellation plugin, as installed. The real one is a 74 MB
    binary under LiveKit's terms, working on LiveKit Cloud only, and not installed here:
    this stand-in module gives what its ``BVCTelephony()`` gives, LiveKit's own options."""
    options = rtc.NoiseCancellationOptions(module_id="bvc-telephony", options={})
    plugin = ModuleType(NOISE_CANCELLATION)
    plugin.BVCTelephony = lambda: options  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, NOISE_CANCELLATION, plugin)
    return options


class StartRecorded(ConsoleSession):
    """The console session, keeping the room options the entrypoint started it with."""

    room_options: Any = None

    async def start(self, agent: Any, **options: Any) -> Any:  # type: ignore[override]
        self.room_options = options.get("room_options")
        return await super().start(agent, **options)


def usage_logged(caplog: pytest.LogCaptureFixture, module: ModuleType) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == module.AGENT_NAME and record.getMessage().startswith("usage: ")
    ]


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
    # LiveKit's turn detector, offline on the model livekit-agents ships (no download)
    assert isinstance(session.turn_detection, inference.TurnDetector)
    assert session.turn_detection.model == "turn-detector-v1-mini"
    # the example's session and policy pass attach's checks
    attach(session, TurnController(module.build_policy()), end_call=lambda reason: None).detach()


async def run_console_call(
    module: ModuleType, entrypoint: str, script: CallScript, traces: Path
) -> tuple[Trace, SimulatedCall]:
    call = SimulatedCall(script)
    module.build_session = lambda proc: call.build_session(StartRecorded)
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


async def test_outbound_caller_answers_in_console_and_writes_its_trace(
    traces: Path,
    telephony_noise_cancellation: rtc.NoiseCancellationOptions,
    caplog: pytest.LogCaptureFixture,
) -> None:
    example = load_example("outbound_caller")
    caplog.set_level(logging.INFO, logger=example.AGENT_NAME)
    check_server(example, "outbound_caller", "outbound-caller")
    check_real_session(example)
    script = CallScript([UserLine(0.3, "hello")])
    trace, call = await run_console_call(example, "outbound_caller", script, traces)
    options = call.session.room_options
    assert options.participant_identity == "sip-+15550100"
    assert options.audio_input.noise_cancellation is telephony_noise_cancellation
    (usage,) = usage_logged(caplog, example)  # at the job's shutdown: what the TTS said
    assert usage.startswith("usage: AgentSessionUsage(model_usage=[TTSModelUsage(")
    assert "provider='turnfsm.sim', model='scripted', characters_count=" in usage
    path = [(step.before, step.event.name, step.after) for step in trace]
    assert ("ringing", "call_answered", "awaiting_user") in path  # the console's answer
    assert ("awaiting_user", "user_transcript", "greeting") in path
    ends = [step for step in path if step[1:] == ("call_ended", "ended")]
    assert len(ends) == 1  # written up to the session's close
    assert path[-1][2] == "ended"
    assert trace.policy.direction == "outbound"
    assert trace.policy.greeting == "[redacted]"  # the policy's text is not stored
    assert [m.text_content for m in call.messages("user")][:1] == ["Hello?"]


async def test_inbound_assistant_greets_in_console_and_writes_its_trace(
    traces: Path,
    telephony_noise_cancellation: rtc.NoiseCancellationOptions,
    caplog: pytest.LogCaptureFixture,
) -> None:
    example = load_example("inbound_assistant")
    caplog.set_level(logging.INFO, logger=example.AGENT_NAME)
    check_server(example, "inbound_assistant", "inbound-assistant")
    check_real_session(example)
    assert [tool.id for tool in example.Receptionist().tools] == ["lookup_appointment"]
    trace, call = await run_console_call(example, "inbound_assistant", CallScript(), traces)
    options = call.session.room_options
    assert options.audio_input.noise_cancellation is telephony_noise_cancellation
    (usage,) = usage_logged(caplog, example)
    assert usage.startswith("usage: AgentSessionUsage(model_usage=[TTSModelUsage(")
    assert "provider='turnfsm.sim', model='scripted', characters_count=" in usage
    path = [(step.before, step.event.name, step.after) for step in trace]
    # told LiveKit's interruption settings, then greets at once
    assert path[:2] == [
        ("start", "interruption_settings", "start"),
        ("start", "session_started", "greeting"),
    ]
    assert [step for step in path if step[1:] == ("call_ended", "ended")]
    assert trace.policy.max_tool_steps == 2
    assert call.audio_output.segments  # the greeting's audio reached the caller


async def test_realtime_agent_answers_in_console_and_writes_its_trace(
    traces: Path,
    telephony_noise_cancellation: rtc.NoiseCancellationOptions,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On the real OpenAI Realtime plugin against the local Realtime test server."""
    example = load_example("realtime_agent")
    caplog.set_level(logging.INFO, logger=example.AGENT_NAME)
    assert example.server._entrypoint_fnc is example.realtime_agent
    assert example.server._agent_name == "realtime-agent"
    microphone, speaker = ToneMicrophone(), PacedAudioOutput(sample_rate=24000)
    async with RealtimeTestServer(RealtimeScript(default_text="Hi!")) as server:
        real_build_session = example.build_session

        def console_session() -> AgentSession:
            session = real_build_session(api_key="dummy", http_session=server.http_session())
            console = StartRecorded(llm=session.llm, vad=None, aec_warmup_duration=None)
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
            assert session.room_options.participant_identity == "sip-+15550100"
            noise_cancellation = session.room_options.audio_input.noise_cancellation
            assert noise_cancellation is telephony_noise_cancellation
            await session.aclose()
            await session.llm.aclose()
            await speaker.aclose()
            for callback in ctx._shutdown_callbacks:  # what the job runner does at shutdown
                await callback("test over")
    (usage,) = usage_logged(caplog, example)  # the realtime model's
    assert usage.startswith("usage: AgentSessionUsage(model_usage=[LLMModelUsage(")
    assert "model='gpt-realtime'" in usage
    (written,) = traces.glob("*.jsonl")
    path = [(step.before, step.event.name, step.after) for step in Trace.read(written)]
    assert ("ringing", "call_answered", "awaiting_user") in path
    assert path[-1][2] == "ended"


async def test_the_readmes_embedding_runs_under_console(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The README's embedding steps as written, run as ``console`` runs them (no SIP trunk
    set: nothing is dialed); only its ``AgentSession(...)`` is the simulated call's."""
    monkeypatch.delenv("SIP_OUTBOUND_TRUNK_ID", raising=False)
    monkeypatch.chdir(tmp_path)  # its trace goes to traces/
    source = readme_embed_block()
    assert source.count("AgentSession(...)") == 1
    call = SimulatedCall(CallScript([UserLine(0.3, "hello")]))
    steps: dict[str, Any] = {
        "server": AgentServer(),
        "simulated_session": lambda: call.build_session(ConsoleSession),
    }
    source = source.replace("AgentSession(...)", "simulated_session()")
    exec(compile(source, "README.md", "exec"), steps)  # the README's own code
    async with run_entrypoint(steps["outbound_caller"], call):
        adapter = adapter_for(call.session)
        assert adapter is not None
        await call.wait_until(
            lambda: adapter.controller.state == "greeting" and bool(call.audio_output.segments),
            timeout=10,
        )
    (written,) = (tmp_path / "traces").glob("*.jsonl")
    path = [(step.before, step.event.name, step.after) for step in Trace.read(written)]
    assert ("ringing", "call_answered", "awaiting_user") in path


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
                assert adapter.controller.trace is not None
                assert call_metrics(adapter.controller.trace).end_reason == "dial_failed"
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


@pytest.mark.parametrize("name", NAMES)
# the path runs LiveKit's deprecated rich CLI on purpose, and LiveKit says so each time
@pytest.mark.filterwarnings("ignore:the built-in Python CLI is deprecated:DeprecationWarning")
def test_each_example_runs_as_a_script(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python examples/X.py --help`` as its ``__main__`` block runs it: LiveKit's older
    CLI on the example's server (kept, as LiveKit's own examples keep it)."""
    example = load_example(name)
    main_block = (EXAMPLES / f"{name}.py").read_text().split('if __name__ == "__main__":')[1]
    assert main_block.strip() == "cli.run_app(server)"
    monkeypatch.setattr(sys, "argv", [f"{name}.py", "--help"])
    with pytest.raises(SystemExit) as exit_:
        example.cli.run_app(example.server)
    assert exit_.value.code in (0, None)
    assert "console" in capsys.readouterr().out


def taught_commands(name: str) -> list[str]:
    """The shell commands an example's docstring shows (a trailing comment cut off)."""
    doc = ast.get_docstring(ast.parse((EXAMPLES / f"{name}.py").read_text(encoding="utf-8")))
    assert doc is not None
    lines = [line.split("  #")[0].strip() for line in doc.replace("\\\n", " ").splitlines()]
    return [line for line in lines if re.match(r"(lk|python\S*|pip|uv) ", line)]


@pytest.mark.parametrize("name", NAMES)
def test_each_example_teaches_livekits_cli(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lk agent console|dev|start examples/X.py``; not LiveKit 1.8.9's deprecated
    ``python X.py console`` nor ``download-files`` (silero's model and the local turn
    detector's come inside their packages). Each path is one LiveKit's own discovery
    (what ``lk agent`` runs: ``python -m livekit.agents console FILE``) finds the
    example's server in."""
    commands = taught_commands(name)
    path = f"examples/{name}.py"
    assert [f"lk agent {mode} {path}" for mode in ("console", "dev", "start")] == [
        command for command in commands if command.startswith("lk agent ")
    ]
    assert not [command for command in commands if command.startswith("python")]
    assert not [command for command in commands if "download-files" in command]
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))  # discovery puts examples/ first
    server = _discover_server(path)
    module = sys.modules[name]
    monkeypatch.delitem(sys.modules, name)
    assert server is module.server
    assert server._agent_name == name.replace("_", "-")


@pytest.mark.parametrize("name", NAMES)
def test_without_the_noise_cancellation_plugin_an_example_takes_the_audio_as_it_comes(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, NOISE_CANCELLATION, None)  # not installed
    example = load_example(name)
    identity = [] if name == "inbound_assistant" else ["sip-+15550100"]
    options = example.build_room_options(*identity)
    assert options.audio_input.noise_cancellation is None


def environment_read(path: Path) -> set[str]:
    """The environment variables a file reads with ``os.getenv`` or ``os.environ``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in (
            "os.getenv",
            "os.environ.get",
        ):
            names.add(ast.literal_eval(node.args[0]))
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) == "os.environ":
            names.add(ast.literal_eval(node.slice))
    return names


LIVEKIT_AND_OPENAI_KEYS = {
    "LIVEKIT_URL",
    "LIVEKIT_API_KEY",
    "LIVEKIT_API_SECRET",
    "OPENAI_API_KEY",
}
"""What the worker (LiveKit's CLI and server) and the OpenAI plugin read themselves."""


def test_the_env_example_names_every_key_the_examples_read() -> None:
    """``cp examples/.env.example .env``, filled in, is all the examples need."""
    read = set().union(*(environment_read(EXAMPLES / f"{name}.py") for name in NAMES))
    assert read == {"TRACE_DIR", "SIP_OUTBOUND_TRUNK_ID"}
    listed = dotenv_values(EXAMPLES / ".env.example")
    assert set(listed) == read | LIVEKIT_AND_OPENAI_KEYS
    assert ".env" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
