package discovery

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestRecordValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Record)
		ok   bool
	}{
		{"valid", func(*Record) {}, true},
		{"dotted id", func(r *Record) { r.ID = "w-1.host_a" }, true},
		{"empty id", func(r *Record) { r.ID = "" }, false},
		{"id with slash", func(r *Record) { r.ID = "a/b" }, false},
		{"id starting with dot", func(r *Record) { r.ID = ".w" }, false},
		{"no model", func(r *Record) { r.Model = "" }, false},
		{"bad role", func(r *Record) { r.Role = "both" }, false},
		{"no request plane", func(r *Record) { r.RequestPlane = "" }, false},
		{"request plane without port", func(r *Record) { r.RequestPlane = "host" }, false},
		{"negative capacity", func(r *Record) { r.CapacityBlocks = -1 }, false},
		{"decode with transfer address", func(r *Record) { r.Role, r.KVTransfer = RoleDecode, KVTransfer{Addr: "h:7", BlockBytes: 1 << 20} }, true},
		{"transfer address without port", func(r *Record) { r.KVTransfer.Addr = "h" }, false},
		{"negative block bytes", func(r *Record) { r.KVTransfer.BlockBytes = -1 }, false},
		{"no shared tiers", func(r *Record) { r.KVShare = KVShare{} }, true},
		{"shared tier name with a newline", func(r *Record) { r.KVShare.Host = "a\nb" }, false},
		{"shared disk name too long", func(r *Record) { r.KVShare.Disk = strings.Repeat("d", maxShareName+1) }, false},
		{"shared disk name not UTF-8", func(r *Record) { r.KVShare.Disk = "\xff" }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := testRecord("w1")
			c.edit(&r)
			err := r.Validate()
			if (err == nil) != c.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, c.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("error %v does not wrap ErrInvalidRecord", err)
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := testRecord("w1")
	r.Role = RoleDecode
	r.KVTransfer = KVTransfer{Addr: "h:7", BlockBytes: 4096}
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalRecord(b)
	if err != nil || got != r {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if !strings.Contains(string(b), `"kv_share":{"host":"host-a/1234/host0","disk":"native:host-a:/var/lib/tandem/kv"}`) {
		t.Fatalf("record JSON %s does not carry kv_share", b)
	}
	r.KVShare = KVShare{}
	if b, err := r.Marshal(); err != nil || strings.Contains(string(b), "kv_share") {
		t.Fatalf("a record without shared tiers writes %s, %v", b, err)
	}
	// A record from an older worker without a role is aggregated; unknown
	// fields from a newer one are ignored.
	old := []byte(`{"id":"w2","model":"m","request_plane":"h:1","future_field":[1,2]}`)
	got, err = UnmarshalRecord(old)
	if err != nil || got.Role != RoleAggregated {
		t.Fatalf("old record: %+v, %v", got, err)
	}
}

func TestKVLayoutFingerprint(t *testing.T) {
	base := KVLayout{Model: "qwen3", DType: "bf16", BlockSize: 16, Layers: 28, KVHeads: 8, HeadSize: 128, TokenizerHash: "abc"}
	// The text form is versioned: this value may only change together with
	// the "kvlayout/1" prefix, or mixed-version fleets would refuse to pair.
	if got, want := base.Fingerprint(), "dad311c6ab143f5afaf9fc8b"; got != want {
		t.Fatalf("fingerprint %q, want %q", got, want)
	}
	cases := []struct {
		name string
		edit func(*KVLayout)
		diff []string
	}{
		{"same", func(*KVLayout) {}, nil},
		{"block size", func(l *KVLayout) { l.BlockSize = 32 }, []string{"block_size: 16 != 32"}},
		{"dtype and heads", func(l *KVLayout) { l.DType, l.KVHeads = "fp8", 4 }, []string{"dtype: bf16 != fp8", "kv_heads: 8 != 4"}},
		{"tokenizer", func(l *KVLayout) { l.TokenizerHash = "def" }, []string{"tokenizer_hash: abc != def"}},
		{"engine layout", func(l *KVLayout) { l.EngineLayout = "mocker/v1/block=16/bytes_per_token=1" }, []string{"engine_layout:  != mocker/v1/block=16/bytes_per_token=1"}},
		{"deployment config", func(l *KVLayout) { l.Config = "0123abcd" }, []string{"config:  != 0123abcd"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := base
			c.edit(&o)
			if d := base.Diff(o); !slices.Equal(d, c.diff) {
				t.Fatalf("Diff = %v, want %v", d, c.diff)
			}
			if same := base.Fingerprint() == o.Fingerprint(); same != (c.diff == nil) {
				t.Fatalf("fingerprints equal = %v, want %v", same, c.diff == nil)
			}
		})
	}
}

func TestParseRole(t *testing.T) {
	for in, want := range map[string]Role{"": RoleAggregated, "aggregated": RoleAggregated, "prefill": RolePrefill, "decode": RoleDecode} {
		if got, err := ParseRole(in); err != nil || got != want {
			t.Errorf("ParseRole(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseRole("both"); err == nil {
		t.Error("ParseRole accepted an unknown role")
	}
}
