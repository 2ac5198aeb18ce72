"""Knative entry point: ``functions-framework --source main.py --target handle --signature-type http``."""
import functions_framework

from kai_fn.function import metrics
from kai_fn.function.handler import App

app = App()  # validates the settings now: a bad one stops the process at start-up, naming it


@functions_framework.http
def handle(request):
    if app.settings.metrics_port:
        metrics.serve(app.settings.metrics_port)  # once, in the worker that counts (the first request starts it)
    return app(request)
