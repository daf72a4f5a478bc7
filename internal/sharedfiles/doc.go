// Package sharedfiles locates the project's read-only companion directory,
// the directory named "shared" beside the repository, which holds the reference model
// (stories260K), traces and reference documents. Tests and defaults use it
// instead of downloading anything. TANDEM_SHARED overrides the location.
// It also finds Tandem's cache of fetched and built files (TANDEM_CACHE,
// else ~/.cache/tandem), where the scripts put tokenizers and tools.
package sharedfiles
