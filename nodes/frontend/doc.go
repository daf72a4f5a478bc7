// Package frontend is the frontend process of a multi-process Tandem: the
// OpenAI frontend and its router, with the router's worker set kept equal to
// the live records of a discovery.Registry.
//
// For every record that appears it checks that the worker can serve what
// the frontend tokenizes (same model, same tokenizer fingerprint) and, for
// prefill and decode workers, that its KV layout matches the workers of the
// other role (kv_layout_mismatch otherwise, with both values); then it
// dials the worker's request plane and adds it to the router, and in kv mode
// has the KV policy follow the worker's events (its ZMQ PUB endpoint, or its
// model's NATS subject). For every record that goes, the worker leaves the
// router and the KV index at once; its connection is closed only once the
// requests still streaming from it are done, so a draining worker finishes
// its streams.
//
// Failures before the first token need nothing here: the frontend retries
// engine.ErrUnavailable on another worker, and a dead worker's
// connection fails exactly that way until its record expires.
package frontend
