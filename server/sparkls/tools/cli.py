"""Command line: `sparkls serve | demo | doctor | convert-model | schema`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from typing import BinaryIO


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host, int(port)


def private_stdout() -> BinaryIO:
    """Keep the real stdout for LSP messages only, and point fd 1 at stderr for everyone else.

    Engines and their native libraries write to fd 1 on their own (vLLM's engine-core process logs
    there, llama.cpp prints, C extensions print): on stdio each such write would corrupt the LSP
    stream. The LSP writer gets a private duplicate of the original stdout; fd 1, which every child
    process inherits, becomes stderr.
    """
    sys.stdout.flush()
    lsp_fd = os.dup(1)
    os.set_inheritable(lsp_fd, False)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(os.dup(2), "w", buffering=1)
    return os.fdopen(lsp_fd, "wb")  # buffered: it completes partial writes; pygls flushes each message


def _serve(args: argparse.Namespace) -> int:
    from sparkls.lsp.app import create_server
    from sparkls.lsp.network import API_KEY_ENV, Guard, NetworkRefused, TokenFilter, plan

    given = (
        ("modelPath", args.model_path),
        ("openaiUrl", args.openai_url),
        ("openaiApiKey", os.environ.get(API_KEY_ENV, "")),
    )
    fixed = {k: v for k, v in given if v}
    server = create_server()
    address: tuple[str, int] | None = args.tcp or args.ws
    if address is not None:
        host, port = address
        try:
            listen = plan(
                host, port, args.token_file, args.allow_origin, args.allow_remote, args.root, fixed, os.environ
            )
        except NetworkRefused as e:
            print(f"sparkls: {e}", file=sys.stderr)
            return 2
        for handler in logging.getLogger().handlers:
            handler.addFilter(TokenFilter(listen.token))
        if listen.token_path is not None:
            print(
                f"sparkls: clients must present the token in {listen.token_path} (readable by you only)",
                file=sys.stderr,
                flush=True,
            )
        if not listen.check_host:
            logging.getLogger("sparkls").warning(
                "listening on %s:%d, reachable from other hosts: anyone with the token can drive this server",
                host,
                port,
            )
        server.guard = listen.guard
        if args.tcp:
            server.start_tcp(listen)
        else:
            server.start_ws(listen)
    else:
        server.guard = Guard((), fixed, network=False) if fixed else None
        server.start_io(sys.stdin.buffer, private_stdout())
    # The client went away (stdin closed) without `shutdown`: stop the engine and its processes anyway.
    with contextlib.suppress(Exception):
        asyncio.run(asyncio.wait_for(server.session.shutdown(), 30))
    # LSP: `exit` after `shutdown` ends with 0, otherwise 1. pygls' `exit` raises SystemExit with that code inside
    # `start_io`, which catches it and returns; its own flag still says whether `shutdown` came.
    return 0 if getattr(server.protocol, "_shutdown", False) else 1


def _network_arguments(serve: argparse.ArgumentParser) -> None:
    net = serve.add_argument_group("network transports (--tcp, --ws)")
    net.add_argument(
        "--token-file",
        default="",
        metavar="PATH",
        help="the token clients must present (else "
        "$SPARKLS_TOKEN; else one is generated into a file only you can read, its path printed)",
    )
    net.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web page origin allowed to open the WebSocket (none by default; repeatable)",
    )
    net.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback bind (then the token must be given, not generated)",
    )
    net.add_argument(
        "--root",
        action="append",
        default=[],
        metavar="DIR",
        help="workspace folders a network client may name must be inside one of these "
        "(default: the current directory; repeatable)",
    )
    serve.add_argument(
        "--model-path",
        default="",
        metavar="PATH",
        help="the model file (wins over the client's `modelPath`, which network clients cannot set)",
    )
    serve.add_argument(
        "--openai-url",
        default="",
        metavar="URL",
        help="the `openai` engine's server (wins over the client's `openaiUrl`, which network "
        "clients cannot set); its key comes from $SPARKLS_OPENAI_API_KEY",
    )


def _parser() -> argparse.ArgumentParser:
    """The command line: `serve` (the default), `demo`, `doctor`, `convert-model` and `schema`."""
    parser = argparse.ArgumentParser(prog="sparkls", description="AI code completion language server")
    parser.add_argument("--log-level", default="INFO", help="stderr log level (default INFO)")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    mode = serve.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (default)")
    mode.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="listen for one client over TCP")
    mode.add_argument("--ws", type=_host_port, metavar="HOST:PORT", help="listen over WebSocket")
    _network_arguments(serve)
    demo = sub.add_parser("demo", help="start the server, open a sample file and show real suggestions")
    demo.add_argument("--engine", default="llamacpp", help="engine setting for the demo server")
    demo.add_argument("--file", help="a source file to use instead of the bundled sample (cursors at ⟨N⟩ marks)")
    demo.add_argument("--threads", type=int, default=0, help="decoding threads (0: the `threads` default)")
    doctor = sub.add_parser("doctor", help="report engine, model, grammars, threads and what is missing")
    doctor.add_argument(
        "--engine",
        choices=("llamacpp", "vllm", "openai"),
        default="llamacpp",
        help="also check this engine: `openai` asks the server at --url for its models and metrics",
    )
    doctor.add_argument("--url", default="http://127.0.0.1:8000/v1", help="the `openai` engine's server")
    doctor.add_argument(
        "--probe",
        action="store_true",
        help="start the engine and run two requests: TTFT, tokens/s, prefix-cache reuse per class",
    )
    doctor.add_argument("--model-path", default="", help="modelPath for the probe (required for --engine vllm)")
    conv = sub.add_parser(
        "convert-model",
        help="write a GGUF model (default: the bundled one) as an HF "
        "safetensors checkpoint, for engine = vllm or vllm serve",
    )
    conv.add_argument("out", help="output directory")
    conv.add_argument("--model-path", default="", help="a GGUF file (default: the bundled --model)")
    conv.add_argument("--model", default="qwen2.5-coder-0.5b", help="bundled model to convert")
    conv.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    schema = sub.add_parser("schema", help="print the settings' JSON schema (camelCase keys, defaults, ranges)")
    schema.add_argument(
        "--vscode",
        action="store_true",
        help="print the VS Code `contributes.configuration` section made from it instead",
    )
    schema.add_argument(
        "--update-package",
        default="",
        metavar="PACKAGE_JSON",
        help="write that section into an extension's package.json",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if logging.getLogger().level > logging.DEBUG:
        logging.getLogger("pygls").setLevel(logging.WARNING)  # its INFO logs every message
    if args.command in (None, "serve"):
        if args.command is None:
            return main([*(argv if argv is not None else sys.argv[1:]), "serve"])
        return _serve(args)
    if args.command == "demo":
        from sparkls.tools.demo import run_demo

        return run_demo(args.engine, args.file, args.threads)
    if args.command == "convert-model":
        from sparkls.tools.convert_model import run_convert

        return run_convert(args.model_path, args.model, args.out, args.dtype)
    if args.command == "doctor":
        from sparkls.tools.doctor import run_doctor

        return run_doctor(args.engine, args.url, args.probe, args.model_path)
    if args.command == "schema":
        from sparkls.tools.schema import run_schema

        return run_schema(args.vscode, args.update_package)
    return 2


if __name__ == "__main__":
    sys.exit(main())
