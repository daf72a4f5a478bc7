package doctor

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// listenSocket is one row of /proc/net/tcp or /proc/net/tcp6 in state
// LISTEN.
type listenSocket struct {
	Addr  netip.AddrPort
	Inode uint64
}

// Limits on what the /proc/net/tcp parser accepts: a row is about 150
// bytes; a host with a million sockets is far past anything Tandem runs
// beside, and a longer line is not the kernel's format.
const (
	maxProcNetLine  = 4 << 10
	maxProcNetRows  = 1 << 20
	tcpListenState  = 0x0A // TCP_LISTEN in include/net/tcp_states.h
	maxProcNetBytes = 256 << 20
)

// parseProcNetTCP reads the listening sockets of a /proc/net/tcp or
// /proc/net/tcp6 table. The format is the kernel's tcp4_seq_show and
// tcp6_seq_show (net/ipv4/tcp_ipv4.c, net/ipv6/tcp_ipv6.c): a header line,
// then "sl: local rem st tx:rx tr:when retrnsmt uid timeout inode ...",
// the local address as hex of the address's 32-bit words in host byte
// order (little-endian on every architecture Go supports with /proc
// besides s390x, ppc64 and mips: those read back byte-swapped, which only
// garbles the address, never the port or inode) and the port as big-endian
// hex. A malformed row is an error naming its line: the doctor then says
// it cannot read the table rather than report a guess.
func parseProcNetTCP(r io.Reader) ([]listenSocket, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, maxProcNetBytes), maxProcNetLine)
	var out []listenSocket
	for n := 0; ; n++ {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n+1, maxProcNetLine)
		}
		if len(line) == 0 && err != nil {
			if err == io.EOF {
				return out, nil
			}
			return nil, err
		}
		if n > maxProcNetRows {
			return nil, fmt.Errorf("more than %d rows", maxProcNetRows)
		}
		s := strings.TrimSpace(string(line))
		if n == 0 || s == "" {
			// The header ("sl local_address ...") says nothing we need.
			if n == 0 && !strings.HasPrefix(s, "sl") {
				return nil, fmt.Errorf("line 1: %.60q is not a /proc/net/tcp header", s)
			}
			continue
		}
		sock, listening, perr := parseProcNetRow(s)
		if perr != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, perr)
		}
		if listening {
			out = append(out, sock)
		}
		if err == io.EOF {
			return out, nil
		}
	}
}

func parseProcNetRow(s string) (listenSocket, bool, error) {
	var sock listenSocket
	f := strings.Fields(s)
	if len(f) < 10 || !strings.HasSuffix(f[0], ":") {
		return sock, false, fmt.Errorf("%.80q: want sl: local remote st ... inode", s)
	}
	st, err := strconv.ParseUint(f[3], 16, 8)
	if err != nil {
		return sock, false, fmt.Errorf("state %q: %w", f[3], err)
	}
	host, port, ok := strings.Cut(f[1], ":")
	if !ok {
		return sock, false, fmt.Errorf("local address %q: want ADDR:PORT", f[1])
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return sock, false, fmt.Errorf("port %q: %w", port, err)
	}
	raw, err := hex.DecodeString(host)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return sock, false, fmt.Errorf("address %q: want 8 or 32 hex digits", host)
	}
	// Each 32-bit word was printed from host order: swap it back.
	for i := 0; i+4 <= len(raw); i += 4 {
		binary.BigEndian.PutUint32(raw[i:], binary.LittleEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(raw)
	inode, err := strconv.ParseUint(f[9], 10, 64)
	if err != nil {
		return sock, false, fmt.Errorf("inode %q: %w", f[9], err)
	}
	sock.Addr, sock.Inode = netip.AddrPortFrom(a.Unmap(), uint16(p)), inode
	return sock, st == tcpListenState, nil
}
