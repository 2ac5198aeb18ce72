"""The bare baseline for the cold-start figure: a functions-framework function that does nothing."""
import functions_framework


@functions_framework.http
def handle(request):
    return ""
