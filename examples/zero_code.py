"""Zero-code: this app does not import firsttoken. Run it under `opentelemetry-instrument`, which
loads firsttoken's instrumentor (its entry point) before the app starts:

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 OPENAI_API_KEY=sk-local \
    OTEL_TRACES_EXPORTER=console OTEL_METRICS_EXPORTER=none \
    opentelemetry-instrument python examples/zero_code.py

Without `opentelemetry-distro` installed, firsttoken sets the export up from the OTEL_* variables
itself; with it, the distro's configurator does.
"""

import os

import openai

MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


def main() -> None:
    client = openai.OpenAI()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello."}],
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
    )
    print("".join(c.choices[0].delta.content or "" for c in stream if c.choices))


if __name__ == "__main__":
    main()
