"""Kokoro-FastAPI text to speech as a systemd service, on CPU or GPU by the seed's rule, streaming per sentence.

    pyinfra -y @lxd/tts deploys/kokoro.py --data kokoro_source=~/src/Kokoro-FastAPI
    pyinfra -y @lxd/tts-gpu deploys/kokoro.py --data kokoro_source=~/src/Kokoro-FastAPI --data kokoro_use=long_form
    labwright verify kokoro --hosts=@lxd/tts

Host data: ``kokoro_source`` (a Kokoro-FastAPI checkout on the control machine, model files in place; required) and
``kokoro_<key>`` for each key of templates/kokoro/defaults.toml [service]. The device is ``kokoro_device`` or, when
empty, the [choice] table's device for ``kokoro_use`` (conversational -> cpu, long_form -> gpu). See docs/kokoro.md.
Kokoro-FastAPI has no API key, so it listens on 127.0.0.1 (``kokoro_host``); another address needs
``kokoro_open=true`` (docs/security.md, "Every engine behind a key").

The checkout is staged on the control machine with the streaming patch applied (labwright.kokoro.streaming: the
same code as `labwright kokoro patch`), then synced to the guest, so a re-run with the same source changes nothing
and an upstream shape the patch does not know stops the deploy before anything changes. Dependencies are the
checkout's pyproject.toml [project] dependencies plus the device's optional group, pip-installed into a venv.
"""

from labwright.deploys.kokoro import deploy_kokoro

deploy_kokoro()
