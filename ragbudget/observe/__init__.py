"""What a query reports: Prometheus metrics and OpenTelemetry spans, from one Answer."""
