package discovery

import "testing"

func TestAdvertise(t *testing.T) {
	cases := []struct{ in, want string }{
		{"127.0.0.1:4000", "127.0.0.1:4000"},
		{"0.0.0.0:4000", "node-a:4000"},
		{"[::]:4000", "node-a:4000"},
		{":4000", "node-a:4000"},
		{"10.1.2.3:4000", "10.1.2.3:4000"},
	}
	for _, c := range cases {
		if got := Advertise(c.in, "node-a"); got != c.want {
			t.Errorf("Advertise(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	urls := []struct{ in, want string }{
		{"", ""},
		{"tcp://*:5557", "tcp://node-a:5557"},
		{"tcp://[::]:5557", "tcp://node-a:5557"},
		{"tcp://127.0.0.1:5557", "tcp://127.0.0.1:5557"},
	}
	for _, c := range urls {
		if got := AdvertiseURL(c.in, "node-a"); got != c.want {
			t.Errorf("AdvertiseURL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
