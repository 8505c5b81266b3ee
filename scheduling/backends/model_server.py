"""A model server that speaks the Open Inference Protocol v2 (KServe's REST protocol) on a
UNIX socket: one replica of a serving workload on the local backend.

Run by the serving interpreter (``make apps`` installs one with scikit-learn and joblib under
``.apps/serving``), never imported by the portal: standard library only, plus what the model's
framework needs. It loads the model before it listens, so a model whose files do not load
exits 1 with the error as the last line of its log (the backend's Failed reason).

Why not KServe's ``ModelServer``: it listens on TCP ports only, and every replica of every
endpoint would share the host's loopback with everyone's workloads; a socket in the
workload's private run dir is reachable by the portal alone (as code-server's is).

Frameworks: ``sklearn`` (a ``*.joblib`` / ``*.pkl`` file loaded with joblib, ``predict``),
``custom`` (``model.py`` in the folder with a class ``Model(model_dir)`` whose
``predict(array)`` returns a list or array).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import socket
import socketserver
import sys
import traceback
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

MAX_BODY = 64 * 1024 * 1024
DATATYPES = {"b": "BOOL", "i": "INT64", "u": "UINT64", "f": "FP64", "U": "BYTES", "O": "BYTES"}


class LoadError(Exception):
    pass


def load(framework: str, model_dir: Path) -> Any:
    """The model object of ``model_dir``: something with ``predict(array)``."""
    if framework == "sklearn":
        files = sorted([*model_dir.glob("*.joblib"), *model_dir.glob("*.pkl")])
        if not files:
            raise LoadError(f"no .joblib or .pkl file in {model_dir}")
        import joblib  # type: ignore[import-not-found]  # the serving venv has it

        model = joblib.load(files[0])
        if not hasattr(model, "predict"):
            raise LoadError(f"{files[0].name} holds a {type(model).__name__}, which cannot predict")
        return model
    if framework == "custom":
        source = model_dir / "model.py"
        if not source.is_file():
            raise LoadError(f"no model.py in {model_dir}")
        spec = importlib.util.spec_from_file_location("quanta_custom_model", source)
        if spec is None or spec.loader is None:
            raise LoadError(f"cannot import {source}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not hasattr(module, "Model"):
            raise LoadError("model.py defines no class Model")
        return module.Model(str(model_dir))
    raise LoadError(f"unknown framework {framework!r} (sklearn or custom)")


def _array(tensor: dict[str, Any]) -> Any:
    data, shape = tensor.get("data"), tensor.get("shape")
    try:
        import numpy

        array = numpy.asarray(data)
        if isinstance(shape, list) and shape:
            array = array.reshape(shape)
        return array
    except ImportError:  # a custom model without numpy gets lists
        return data


def _tensor(name: str, values: Any) -> dict[str, Any]:
    try:
        import numpy

        array = numpy.asarray(values)
        datatype = DATATYPES.get(array.dtype.kind, "BYTES")
        data = array.reshape(-1).tolist()
        if datatype == "BYTES":
            data = [str(v) for v in data]
        return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}
    except ImportError:
        values = list(values)
        return {"name": name, "shape": [len(values)], "datatype": "FP64", "data": values}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the gateway reuses its connections
    server: Server

    def address_string(self) -> str:  # a UNIX socket has no client address
        return "portal"

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request would fill the log; errors are logged below

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        name = self.server.model_name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v2/health/live":
            self._send(200, {"live": True})
        elif path == "/v2/health/ready":
            self._send(200, {"ready": True})
        elif path == "/v2":
            self._send(200, {"name": "quanta-model-server", "version": "1", "extensions": []})
        elif path == f"/v2/models/{name}/ready":
            self._send(200, {"name": name, "ready": True})
        elif path == f"/v2/models/{name}":
            self._send(
                200,
                {
                    "name": name,
                    "versions": [self.server.version],
                    "platform": self.server.framework,
                },
            )
        else:
            self._send(404, {"error": f"no route {path}"})

    def do_POST(self) -> None:
        name = self.server.model_name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path not in (
            f"/v2/models/{name}/infer",
            f"/v2/models/{name}/versions/{self.server.version}/infer",
        ):
            self._send(
                404, {"error": f"no model {path.split('/')[3] if path.count('/') >= 3 else ''}"}
            )
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(413, {"error": "request too large"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"null")
            inputs = request["inputs"]
            array = _array(inputs[0])
        except (ValueError, KeyError, TypeError, IndexError) as error:
            self._send(400, {"error": f"not a v2 inference request: {error}"})
            return
        try:
            predictions = self.server.model.predict(array)
        except Exception as error:  # the model's own error, for the caller
            self._send(400, {"error": f"{type(error).__name__}: {error}"})
            return
        body: dict[str, Any] = {
            "model_name": name,
            "model_version": self.server.version,
            "outputs": [_tensor("predict", predictions)],
        }
        if isinstance(request.get("id"), str):
            body["id"] = request["id"]
        self._send(200, body)


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    model: Any
    model_name: str
    framework: str
    version: str


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--model-name", required=True)
    parser.add_argument("--framework", default="sklearn")
    parser.add_argument("--version", default="1")
    args = parser.parse_args(argv)
    try:
        model = load(args.framework, Path(args.model_dir))
    except Exception as error:
        traceback.print_exc()
        # The last line of the log is the reason the portal shows.
        print(f"the model does not load: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    if os.path.exists(args.socket):
        os.unlink(args.socket)
    old = os.umask(0o177)  # the socket is the gate: only this user (the portal) connects
    server = Server(args.socket, Handler)
    os.umask(old)
    server.model, server.model_name = model, args.model_name
    server.framework, server.version = args.framework, args.version
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    print(f"serving {args.model_name} ({args.framework}) on {args.socket}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever(poll_interval=0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
