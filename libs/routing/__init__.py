"""Zone-aware routing and failure policy of the gateway, with no network code except the health Watch:
endpoints, health and ejection, the picker, retries and their budget, and `Attempts`, the request
loop of one piece of work."""
