package diagdoc

import (
	"slices"
	"strings"
	"testing"
)

func TestDocumented(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string
		err       bool
	}{
		{"table", "# A\n\n## Diagnostic codes\n\n| code | who |\n| --- | --- |\n| `b_x` / `a_y` | w |\n| `a_y` | again |\n\n## Next\n\n| `not_this` | x |\n", []string{"a_y", "b_x"}, false},
		{"no section", "# A\n", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Documented(tc.doc)
			if (err != nil) != tc.err || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v %v, want %v (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestRegisteredIn(t *testing.T) {
	got, err := RegisteredIn("testdata/reg")
	if err != nil || !slices.Equal(got, []string{"code_a", "code_b"}) {
		t.Fatalf("got %v %v", got, err)
	}
	if _, err := RegisteredIn("testdata/bad"); err == nil || !strings.Contains(err.Error(), "not a constant") {
		t.Fatalf("a literal argument: %v", err)
	}
	if _, err := RegisteredIn("testdata"); err == nil {
		t.Fatal("a folder that registers nothing passed")
	}
}
