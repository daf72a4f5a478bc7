package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/kvtransfer"
	"github.com/tandemllm/tandem/requestplane"
)

// The attacker's own address: a second address on the loopback interface
// (Linux routes all of 127.0.0.0/8 to lo), so every connection below
// crosses from another address to the workers' 127.0.0.2 listeners, as a
// stranger's would, rather than from the workers' own. A network
// namespace (TestDisaggSlowLink's kind) would be closer to another host;
// this needs no root, so it runs in every `go test ./...`.
const (
	victimHost   = "127.0.0.2"
	attackerHost = "127.0.0.3"
)

func attackerDialer() *net.Dialer {
	return &net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(attackerHost)}}
}

// TestAttacks runs each finding of the security review against real
// worker processes, first with the protections off (the attack works),
// then on (it is refused). Protections: mutual TLS on the request and KV
// transfer planes (--mtls-*), transfer tokens (always on) and the
// prefill worker's published-peers rule (--transfer-peers discovery, the
// default).
func TestAttacks(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	if secure.on {
		t.Skip("runs its own open and protected configurations")
	}
	if l, err := net.Listen("tcp", attackerHost+":0"); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		l.Close()
	}
	certs := t.TempDir()
	if _, err := authn.Init(certs, 1, 1, nil, time.Hour); err != nil {
		t.Fatal(err)
	}
	mtlsFlags := " --mtls-ca " + filepath.Join(certs, "ca.crt") + " --mtls-cert " + filepath.Join(certs, "worker-1.crt") +
		" --mtls-key " + filepath.Join(certs, "worker-1.key")
	frontendID, err := authn.Load(authn.Files{CA: filepath.Join(certs, "ca.crt"), Cert: filepath.Join(certs, "frontend-1.crt"), Key: filepath.Join(certs, "frontend-1.key")})
	if err != nil {
		t.Fatal(err)
	}
	const bpt = 1024
	victim := make([]engine.Token, 33) // two whole blocks and the last token
	for i := range victim {
		victim[i] = engine.Token(100 + i)
	}
	for _, tc := range []struct {
		name      string
		protected bool
	}{{"open", false}, {"protected", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			flags := " --discovery file --discovery-dir " + dir + " --speedup 100 --kv-bytes-per-token 1024 --deregister-delay 0s" +
				" --rp-addr " + victimHost + ":0 --kv-transfer-addr " + victimHost + ":0"
			if tc.protected {
				flags += mtlsFlags
			} else {
				flags += " --transfer-peers any"
			}
			startProc(t, "d1", "worker --id d1 --role decode"+flags, workerReady)
			startProc(t, "p1", "worker --id p1 --role prefill"+flags, workerReady)
			dec, pre := readRecord(t, dir, "d1"), readRecord(t, dir, "p1")

			// What a frontend sees of the decode worker's cache: in the
			// protected run, over the frontend's own mTLS identity.
			var legit []grpc.DialOption
			if tc.protected {
				legit = append(legit, grpc.WithTransportCredentials(credentials.NewTLS(frontendID.Client(authn.RoleWorker))))
			}
			cachedOnDecode := func() int {
				c, err := requestplane.Dial(dec.RequestPlane, legit...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				a, err := requestplane.NewSide(c, requestplane.SideDesc{ID: "d1"}).Assess(ctx, victim, 0)
				if err != nil {
					t.Fatal(err)
				}
				return a.CachedTokens
			}
			stranger := func(addr string) *requestplane.Client {
				c, err := requestplane.Dial(addr, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
					return attackerDialer().DialContext(ctx, "tcp", a)
				}))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}

			t.Run("work without the frontend", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				st, err := stranger(dec.RequestPlane).Generate(ctx, &engine.Request{ID: "x", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 4, IgnoreEOS: true})
				n := 0
				for err == nil {
					var d engine.Delta
					if d, err = st.Recv(); err == nil {
						n += len(d.Tokens)
					}
				}
				served := n > 0
				if served == tc.protected {
					t.Fatalf("a stranger's Generate: %d tokens (err %v); protected %v", n, err, tc.protected)
				}
			})

			t.Run("KV-cache poisoning", func(t *testing.T) {
				if got := cachedOnDecode(); got != 0 {
					t.Fatalf("the fresh decode worker already caches %d tokens", got)
				}
				// The attacker computes the victim prefix's blocks on its own
				// engine (garbage, as far as the victim is concerned), gets a
				// token the way a frontend does, and pushes them.
				eng, err := mocker.New(mocker.Config{Instant: true, KVBytesPerToken: bpt, KVCapacityTokens: 4096})
				if err != nil {
					t.Fatal(err)
				}
				defer eng.Close()
				drain(t, eng, victim)
				n, err := kvtransfer.NewNode(kvtransfer.Config{ID: "p1", Port: eng, Timeout: 5 * time.Second,
					Dial: attackerDialer().DialContext})
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				tok, terr := requestplane.NewSide(stranger(dec.RequestPlane), requestplane.SideDesc{ID: "d1"}).TransferToken(ctx, "p1", victim[:32], 0)
				_, serr := n.Send(ctx, kvtransfer.Peer{ID: "d1", Addr: dec.KVTransfer.Addr, Token: tok}, victim[:32], 0)
				got := cachedOnDecode()
				if tc.protected {
					if got != 0 || serr == nil {
						t.Fatalf("poisoned through mTLS: %d tokens cached (token %v, send %v)", got, terr, serr)
					}
					t.Logf("refused: token %v; send %v", terr, serr)
					return
				}
				if got != 32 {
					t.Fatalf("the open worker did not take the blocks: %d cached (token %v, send %v)", got, terr, serr)
				}
			})

			t.Run("SSRF through Link", func(t *testing.T) {
				lis, err := net.Listen("tcp", attackerHost+":0")
				if err != nil {
					t.Fatal(err)
				}
				defer lis.Close()
				got := make(chan int64, 1)
				go func() {
					c, err := lis.Accept()
					if err != nil {
						got <- 0
						return
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					// Answer the probe frames as a receiver would, counting bytes.
					var total int64
					hdr := make([]byte, 5)
					for {
						if _, err := io.ReadFull(c, hdr); err != nil {
							break
						}
						size := int64(hdr[1]) | int64(hdr[2])<<8 | int64(hdr[3])<<16 | int64(hdr[4])<<24
						m, _ := io.CopyN(io.Discard, c, size)
						total += m
						if _, err := c.Write([]byte{6, 4, 0, 0, 0, hdr[1], hdr[2], hdr[3], hdr[4]}); err != nil {
							break
						}
					}
					got <- total
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				defer cancel()
				_, lerr := requestplane.NewSide(stranger(pre.RequestPlane), requestplane.SideDesc{ID: "p1"}).
					LinkThroughput(ctx, kvtransfer.Peer{ID: "victim", Addr: lis.Addr().String()})
				lis.Close()
				bytes := <-got
				if tc.protected {
					if bytes != 0 || lerr == nil {
						t.Fatalf("the prefill worker sent %d bytes to the stranger's address (err %v)", bytes, lerr)
					}
					return
				}
				if bytes < 1<<20 {
					t.Fatalf("the open prefill worker sent %d bytes (err %v)", bytes, lerr)
				}
				t.Logf("open: the prefill worker sent %d bytes to an address of the caller's choosing", bytes)
			})
		})
	}
}

// TestSSRFWithoutMTLS: the published-peers rule holds even on an
// unauthenticated request plane: a prefill worker never dials an address
// discovery did not publish, whoever asks.
func TestSSRFWithoutMTLS(t *testing.T) {
	if testing.Short() || secure.on {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	startProc(t, "p1", "worker --id p1 --role prefill --discovery file --discovery-dir "+dir+" --rp-addr 127.0.0.1:0 --deregister-delay 0s", workerReady)
	pre := readRecord(t, dir, "p1")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan bool, 1)
	go func() {
		c, err := lis.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err == nil
	}()
	c, err := requestplane.Dial(pre.RequestPlane)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, lerr := requestplane.NewSide(c, requestplane.SideDesc{ID: "p1"}).LinkThroughput(ctx, kvtransfer.Peer{ID: "x", Addr: lis.Addr().String()})
	if kvtransfer.CodeOf(lerr) != kvtransfer.CodeRefusedPeer {
		t.Fatalf("Link to an unpublished address: %v", lerr)
	}
	lis.Close()
	if <-accepted {
		t.Fatal("the prefill worker connected to an unpublished address")
	}
}

func readRecord(t *testing.T, dir, id string) discovery.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, id+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Record discovery.Record `json:"record"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e.Record
}

func drain(t *testing.T, e engine.Engine, p []engine.Token) {
	t.Helper()
	st, err := e.Generate(context.Background(), &engine.Request{Prompt: p, MaxTokens: 1, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := st.Recv(); err != nil {
			return
		}
	}
}

