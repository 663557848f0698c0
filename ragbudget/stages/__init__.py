"""The stages of one request, in the order a query meets them: request → admission → answer cache
→ condense → retrieval → context (rerank, trim, history, prompt) → generation → accounting."""
