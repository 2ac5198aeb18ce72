"""The shell that answers one event: settings, decoding, API calls, reconciliation and reporting around the core."""
