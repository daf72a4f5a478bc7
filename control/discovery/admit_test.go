package discovery

import "testing"

func TestRefuse(t *testing.T) {
	layout := KVLayout{Model: "m", BlockSize: 16, TokenizerHash: "tok", DType: "f16"}
	other := layout
	other.BlockSize = 32
	rec := func(id string, role Role, l KVLayout) Record {
		return Record{ID: id, Model: "m", Role: role, KVLayout: l}
	}
	cases := []struct {
		name  string
		rec   Record
		peers []Record
		want  string // the refusal's code; "" admits
	}{
		{"aggregated", rec("a", RoleAggregated, layout), nil, ""},
		{"other model", Record{ID: "a", Model: "x", Role: RoleAggregated}, nil, DiagModelUnserved},
		{"other tokenizer", rec("a", RoleAggregated, KVLayout{TokenizerHash: "beef"}), nil, DiagTokenizer},
		{"no tokenizer hash", rec("a", RoleAggregated, KVLayout{}), nil, ""},
		{"decode matches prefill", rec("d", RoleDecode, layout), []Record{rec("p", RolePrefill, layout)}, ""},
		{"decode differs from prefill", rec("d", RoleDecode, other), []Record{rec("p", RolePrefill, layout)}, DiagKVLayoutMismatch},
		{"same role may differ", rec("d", RoleDecode, other), []Record{rec("d2", RoleDecode, layout)}, ""},
		{"aggregated ignores peers", rec("a", RoleAggregated, other), []Record{rec("p", RolePrefill, layout)}, ""},
		{"its own old record", rec("p", RolePrefill, other), []Record{rec("p", RoleDecode, layout)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Refuse(c.rec, "m", "tok", c.peers)
			switch {
			case c.want == "" && r != nil:
				t.Fatalf("refused: %+v", r)
			case c.want != "" && (r == nil || r.Code != c.want || r.Msg == ""):
				t.Fatalf("got %+v, want code %s", r, c.want)
			}
		})
	}
}

func TestUnpaired(t *testing.T) {
	rec := func(role Role, protocol string) Record {
		return Record{Role: role, KVTransfer: KVTransfer{Protocol: protocol}}
	}
	cases := []struct {
		name string
		recs []Record
		want int
	}{
		{"none", nil, 0},
		{"aggregated only", []Record{rec(RoleAggregated, "")}, 0},
		{"decode alone", []Record{rec(RoleDecode, ""), rec(RoleDecode, "")}, 2},
		{"paired", []Record{rec(RoleDecode, ""), rec(RolePrefill, "")}, 0},
		{"other protocol", []Record{rec(RoleDecode, ProtocolVLLM), rec(RolePrefill, "")}, 1},
	}
	for _, c := range cases {
		if got := Unpaired(c.recs); got != c.want {
			t.Errorf("%s: Unpaired = %d, want %d", c.name, got, c.want)
		}
	}
}
