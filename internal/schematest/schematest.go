// Package schematest compiles JSON Schemas with a well-kept validator
// (santhosh-tekuri/jsonschema, formats asserted), so that tests check
// structured outputs with code other than the code under test.
package schematest

import (
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Compile compiles schema (a JSON document) or fails the test.
func Compile(tb testing.TB, schema string) *jsonschema.Schema {
	tb.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		tb.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		tb.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
