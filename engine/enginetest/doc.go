// Package enginetest provides Scripted, a deterministic in-memory engine for
// tests of the layers above the engine seam (request plane, frontend). It is
// a test double at the engine.Engine seam only; end-to-end tests run the
// real mocker through the same seam.
package enginetest
