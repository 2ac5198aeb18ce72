"""Knative entry point: ``python -m kai_fn.function.serve`` serves ``handle`` (kai_fn/function/serve.py says why not
functions-framework's own CLI)."""
import flask
import functions_framework

from kai_fn.function import metrics
from kai_fn.function.handler import App

app = App()  # validates the settings now: a bad one stops the process at start-up, naming it
if app.settings.metrics_port:
    metrics.serve(app.settings.metrics_port)  # once: the server is this one process, which counts every request


@functions_framework.http
def handle(request: flask.Request) -> flask.Response:
    return app(request)
