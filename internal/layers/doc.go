// Package layers holds TestImportLayers, which checks every package's
// imports against the ranked layers in docs/ARCHITECTURE.md ("Import
// layers"): a package may import only packages of lower layers. The table
// in that page is the rule; this package only enforces it.
package layers
