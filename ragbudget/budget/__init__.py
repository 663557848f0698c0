"""Token budgets: the one allocation rule, fitting retrieved context and history into their sections."""
