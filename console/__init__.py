"""What every app of the console builds on and nothing else: the append-only model base, the OpenAPI error shape,
the API pager and the htmx request type. It imports no app."""
