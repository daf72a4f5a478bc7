// Package sharedfiles locates the project's read-only companion directory,
// the directory named "shared" beside the repository, which holds the reference model
// (stories260K), traces and reference documents. Tests and defaults use it
// instead of downloading anything. TANDEM_SHARED overrides the location.
package sharedfiles
