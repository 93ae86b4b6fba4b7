"""Who may act in the console and what they did: harness tokens, roles, authentication, throttles, the audit log."""
