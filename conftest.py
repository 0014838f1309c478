"""The project's root conftest: turnfsm's pytest plugin, as a project testing its own agent
registers it (README, "Testing your agent"). Its loop hook puts the tests that use
``turnfsm_call`` (examples/) on the virtual clock; tests/conftest.py decides for tests/."""

pytest_plugins = ["turnfsm.adapters.sim.testing"]
