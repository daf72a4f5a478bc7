// Package dispatch owns a request's life between the HTTP API and the
// router, as Dynamo's migration operator does in front of its push
// router. httpapi validates, templates, tokenizes and admits a request,
// then calls Dispatcher.Generate once per choice; everything from there to
// the stream's end is here:
//
//   - route: router.Route picks a worker (excluding those that already
//     failed this request); the decision's predicted prefix travels to
//     the worker's Generator on a routed.Request (engine/routed), which
//     the disaggregation wrappers (disagg, disagg/vllmpd) read. It is not
//     part of engine.Request: it never crosses the request plane.
//   - retry: a worker that is unreachable (engine.ErrUnavailable) before
//     the first token is quarantined and the request is tried on another
//     one, up to Config.MaxRetries times (--max-retries).
//   - first-token timeout: each attempt waits at most
//     Config.FirstTokenTimeout for its first token, then the request is
//     tried elsewhere, else it fails with ErrFirstTokenTimeout (the HTTP
//     layer's 504 first_token_timeout).
//   - migration: a stream whose worker fails after the first token
//     continues on another worker with the prompt plus the tokens already
//     sent, up to Config.MigrationLimit times (--migration-limit); the
//     caller sees one unbroken Stream.
//   - the router's callbacks: Routed (in Route), FirstToken (with the
//     engine's cached tokens, or late from the usage at the end), Progress
//     per delta (stuck detection), Unreachable (quarantine) and Done; the
//     router's reachability and stuck hooks raise worker_unreachable and
//     worker_stuck on the board.
//
// Generate returns once the first token is in (or every worker failed),
// so the HTTP layer can still answer with a status code. Choices after
// the first of an n > 1 request are pinned (Request.Pin) to the worker
// choice 0 was first routed to, after its first token, so they find the
// prompt cached: no routing, retry or migration, and no load counted
// twice.
//
// Workers reports the routed workers' state for /health, so that httpapi
// needs neither router nor the disaggregation packages.
package dispatch
