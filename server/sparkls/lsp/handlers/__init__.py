"""LSP handlers, one module per feature: adapters from protocol types to the services and back.

Each handler reads its params, takes a snapshot, converts the position to an offset, calls one service
function and converts the result (`common` holds the shared steps: unknown documents and impossible positions
answer `InvalidParams`, engine failures are logged with their traceback and answered empty, results computed
for an older version are dropped). No decisions are made here."""
