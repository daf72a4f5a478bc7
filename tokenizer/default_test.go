package tokenizer

import (
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"

	"github.com/tandemllm/tandem/tokenid"
)

func TestDefaultGolden(t *testing.T) {
	m := testDefault(t)
	tok := m.Tokenizer
	const text = "Once upon a time, there was a little girl named Lily."
	want := []tokenid.ID{18049, 7557, 261, 1058, 11, 1354, 673, 261, 3389, 8881, 11484, 72406, 13}
	if got := tok.Encode(text); !slices.Equal(got, want) {
		t.Fatalf("Encode = %v, want %v", got, want)
	}
	if got := tok.Decode(want); got != text {
		t.Fatalf("Decode = %q", got)
	}
	if m.Name != "tandem-mock" || m.ContextLength != 32768 {
		t.Errorf("model = %q ctx %d", m.Name, m.ContextLength)
	}
	if got := tok.EOS(); !slices.Equal(got, []tokenid.ID{MockImEnd, O200kEndOfText}) {
		t.Errorf("EOS = %v", got)
	}
	if _, ok := tok.BOS(); ok {
		t.Error("default model must not prepend BOS")
	}
	if tok.VocabSize() != 200021 {
		t.Errorf("VocabSize = %d", tok.VocabSize())
	}
}

func TestDefaultSpecialTokens(t *testing.T) {
	tok := testDefault(t).Tokenizer
	tests := []struct {
		text string
		want []tokenid.ID
	}{
		{"<|im_start|>", []tokenid.ID{MockImStart}},
		{"<|im_end|><|endoftext|><|endofprompt|>", []tokenid.ID{MockImEnd, O200kEndOfText, O200kEndOfPrompt}},
		{"<|im_start|>user\nhi<|im_end|>\n", []tokenid.ID{MockImStart, 1428, 198, 3686, MockImEnd, 198}},
		{"<|im_start", []tokenid.ID{27, 91, 321, 10949}},
	}
	for _, tt := range tests {
		got := tok.Encode(tt.text)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Encode(%q) = %v, want %v", tt.text, got, tt.want)
		}
		if d := tok.Decode(got); d != tt.text {
			t.Errorf("Decode(Encode(%q)) = %q", tt.text, d)
		}
	}
	for _, id := range []tokenid.ID{MockImStart, MockImEnd, O200kEndOfText} {
		if !IsSpecial(tok, id) {
			t.Errorf("IsSpecial(%d) = false", id)
		}
	}
	// Holes in the id space decode to nothing rather than failing.
	if got := tok.Decode([]tokenid.ID{199998, 200005, -1, 1 << 30}); got != "" {
		t.Errorf("holes decode to %q", got)
	}
}

// failingTransport records any HTTP request made while it is installed.
type failingTransport struct{ calls int }

func (f *failingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	f.calls++
	return nil, errors.New("network access is forbidden in this test")
}

// TestDefaultIsOffline proves Default never touches the network: every
// request through net/http's defaults fails and is counted, and proxies
// point at a closed port. (tiktoken-go's own GetEncoding would download
// o200k_base; Default never calls it.)
func TestDefaultIsOffline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		t.Setenv(k, closed)
	}
	t.Setenv("TIKTOKEN_CACHE_DIR", t.TempDir()) // no cached download to hide behind
	ft := &failingTransport{}
	old := http.DefaultTransport
	http.DefaultTransport = ft
	defer func() { http.DefaultTransport = old }()

	m, err := Default()
	if err != nil {
		t.Fatalf("Default offline: %v", err)
	}
	if ft.calls != 0 {
		t.Fatalf("Default made %d HTTP requests", ft.calls)
	}
	if got := m.Tokenizer.Encode("hello world"); !slices.Equal(got, []tokenid.ID{24912, 2375}) {
		t.Fatalf("Encode = %v", got)
	}
}

// tiktokenGoReference builds tiktoken-go's own encoder over the same
// embedded ranks, as the oracle for our o200k implementation.
func tiktokenGoReference(t testing.TB) *tiktoken.Tiktoken {
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		t.Fatal(err)
	}
	specials := map[string]int{"<|endoftext|>": 199999, "<|endofprompt|>": 200018, "<|im_start|>": 200019, "<|im_end|>": 200020}
	bpe, err := tiktoken.NewCoreBPE(ranks, specials, PatternO200k)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]any{}
	for k := range specials {
		set[k] = true
	}
	return tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{Name: "o200k_base", PatStr: PatternO200k, MergeableRanks: ranks, SpecialTokens: specials}, set)
}

// trickyTexts exercise pre-tokenizer branches, used by several tests.
var trickyTexts = []string{
	"", " ", "  ", "\n", "a", "Hello world", "  leading and trailing  ", "tabs\tand\t\ttabs",
	"line1\nline2\r\nline3\r\n\r\n", "\n\n\n   \n\t\n  x", "中文分词测试：你好，世界！日本語のテキスト。한국어",
	"emoji 🎉🔥👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵", "I'm sure you'll see they've he'd won't IT'S WE'RE 'S 'x",
	"func main() {\n\tfmt.Println(\"hi\")\n}", "def f(x):\n    return x ** 2\n",
	"3.14159 1234567890 1,000,000 -42 0x1F ١٢٣ ½ Ⅻ", "<|im_start|>user\nhi<|im_end|>", "café cafe\u0301 \u212B ǅungla ᾈ",
	"Привет мир! مرحبا שלום नमस्ते", "!!!??? ... --- === *** ///\\\\ ~~~ /\n/\r\n", "a\u00a0b\u2003c\u3000d\u200b",
	"HTTPServer XMLHttpRequest iPhone McDonald's", "n̷̢ z̤͔̓ Zalgo̵̡͚̍ \u0301\u0301x", "   \n", "x   ", " \t \n \r ",
	"ABC'sDEF'llGHI'VE", "ŉ ǈ ǲ ᴬᴮ ʰʲ", "\u2028\u2029\u0085\ufeff", "x\u0300\u0300\u0300Y\u0301",
}

func TestDefaultMatchesTiktokenGo(t *testing.T) {
	tok := testDefault(t).Tokenizer
	ref := tiktokenGoReference(t)
	check := func(text string) {
		t.Helper()
		want := ref.Encode(text, []string{"all"}, nil)
		got := tok.Encode(text)
		if len(got) != len(want) {
			t.Fatalf("Encode(%q)\n got %v\nwant %v", text, got, want)
		}
		for i := range got {
			if int(got[i]) != want[i] {
				t.Fatalf("Encode(%q)\n got %v\nwant %v", text, got, want)
			}
		}
	}
	for _, text := range trickyTexts {
		check(text)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		check(randomText(rng, 1+rng.IntN(40)))
	}
}

// randomText draws runes from classes the split patterns distinguish.
func randomText(rng *rand.Rand, n int) string {
	alphabet := []string{
		"a", "b", "Z", "Q", "é", "É", "ǅ", "ʰ", "中", "ア", "ß", "\u0301", "\u0323", "1", "7", "٣", "½", "Ⅻ",
		" ", " ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "'", "'s", "'LL", "'re", "’",
		".", ",", "!", "/", "\\", "-", "_", "(", "<", ">", "|", "🎉", "👍🏽", "\u200d", "<|im_end|>", "<think>",
	}
	var sb strings.Builder
	for i := 0; i < n; i++ {
		sb.WriteString(alphabet[rng.IntN(len(alphabet))])
	}
	return sb.String()
}

func TestBuiltinChatML(t *testing.T) {
	m := testDefault(t)
	tests := []struct {
		name     string
		messages string
		tools    string
		gen      bool
		want     string
	}{
		{"plain", `[{"role":"user","content":"Hi"}]`, "", true,
			"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"},
		{"no-gen", `[{"role":"system","content":"S"},{"role":"user","content":"Hi"},{"role":"assistant","content":"Yo"}]`, "", false,
			"<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n"},
		{"tools", `[{"role":"system","content":"S"},{"role":"user","content":"W?"}]`, `[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}}]`, true,
			"<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions. Reply with <tool_call>{\"name\": <function-name>, \"arguments\": <args-json-object>}</tool_call>.\n<tools>\n" +
				`{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}` +
				"\n</tools><|im_end|>\n<|im_start|>user\nW?<|im_end|>\n<|im_start|>assistant\n"},
		{"tool-call", `[{"role":"user","content":"W?"},{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"w","arguments":"{\"c\": 1}"}}]},{"role":"tool","content":"sunny"}]`, "", true,
			"<|im_start|>user\nW?<|im_end|>\n<|im_start|>assistant\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"c\": 1}}\n</tool_call><|im_end|>\n<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\n"},
		{"parts", `[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]`, "", false,
			"<|im_start|>user\na\nb<|im_end|>\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ChatInput{Messages: []byte(tt.messages), AddGenerationPrompt: tt.gen}
			if tt.tools != "" {
				in.Tools = []byte(tt.tools)
			}
			got, err := m.Template.Render(in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}
