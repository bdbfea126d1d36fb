"""PortListeners / OllamaPresent parsing: who holds a port, and whether it is the unit's own main process."""

from __future__ import annotations

from labwright.facts.llamacpp import OllamaPresent, PortListeners, ReadableBy

SS_LINE = 'ss LISTEN 0 512 0.0.0.0:8001 0.0.0.0:* users:(("llama-server",pid=4242,fd=3))'


def test_port_held_by_the_units_main_process_is_ours():
    facts = PortListeners().process([SS_LINE, "@@labwright-mainpid=4242"])
    assert facts == {"pids": [4242], "names": ["llama-server"], "main_pid": 4242, "ours": True}


def test_port_held_by_another_process_is_not_ours():
    line = 'ss LISTEN 0 5 0.0.0.0:8001 0.0.0.0:* users:(("python3",pid=77,fd=3))'
    facts = PortListeners().process([line, "@@labwright-mainpid=4242"])
    assert facts["pids"] == [77] and facts["names"] == ["python3"] and not facts["ours"]


def test_free_port_and_a_stopped_unit():
    facts = PortListeners().process(["@@labwright-mainpid=0"])
    assert facts["pids"] == [] and not facts["ours"]


def test_a_listener_without_a_visible_pid_is_someone_elses():
    facts = PortListeners().process(["ss LISTEN 0 5 0.0.0.0:8001 0.0.0.0:*", "@@labwright-mainpid=4242"])
    assert facts["pids"] == [-1] and not facts["ours"]


def test_port_command_quotes_the_unit_and_casts_the_port():
    command = PortListeners().command(port=8001, service="llama-server")
    assert "sport = :8001" in command and "llama-server.service" in command


def test_ollama_presence():
    assert OllamaPresent().process(["unit", "binary"]) == {"unit": True, "binary": True}
    assert OllamaPresent().process(["binary"]) == {"unit": False, "binary": True}
    assert OllamaPresent.default() == {"unit": False, "binary": False}


def test_readable_by_falls_back_to_nobody_and_reads_the_last_line():
    command = ReadableBy().command(path="/srv/models/my model.gguf", user="llama")
    assert "u=nobody" in command and "'/srv/models/my model.gguf'" in command
    assert ReadableBy().process(["yes"]) is True
    assert ReadableBy().process(["no"]) is False
    assert ReadableBy().process([]) is False
