package web

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/tandemhq/tandem"
)

// bodyBuffers hold the bodies of POST /v1/reservations while they are
// parsed, reused across requests.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// decodeReserve reads the body of POST /v1/reservations into body, with
// exactly decodeJSON's outcome (the same body, or the same error), at a
// fraction of its cost for the bodies clients send: the body is read into
// a reused buffer and parsed by parseReserve, which accepts only what
// encoding/json would decode to the same value without error (plain
// ASCII strings, integers, each known field once). Anything else (escapes,
// floats, nulls but ttl_seconds', unknown or repeated or differently cased
// fields, a body over MaxBodyBytes) goes to decodeJSON's own decoder, on
// the same bytes, for its answer.
func decodeReserve(w http.ResponseWriter, r *http.Request, body *reserveBody) error {
	if err := checkJSONBody(r); err != nil {
		return err
	}
	bp := bodyBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= 2*MaxBodyBytes {
			bodyBuffers.Put(bp)
		}
	}()
	buf := (*bp)[:0]
	var readErr error
	for len(buf) <= MaxBodyBytes {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			if err != io.EOF {
				readErr = err
			}
			break
		}
	}
	*bp = buf
	if readErr == nil && len(buf) <= MaxBodyBytes && parseReserve(buf, body) {
		return nil
	}
	*body = reserveBody{}
	rest := io.Reader(r.Body)
	if readErr != nil {
		rest = errReader{readErr}
	}
	return decodeStrict(w, io.NopCloser(io.MultiReader(bytes.NewReader(buf), rest)), body)
}

// errReader fails every read with err: the read error of the body, replayed
// for the decoder after the bytes that came before it.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// parseReserve parses a reserve body of the plain shape into body, and
// reports whether it could: when it returns true, encoding/json's strict
// decoding (decodeStrict) gives the same value and no error; when false,
// body is left in any state and the caller decodes again.
func parseReserve(data []byte, body *reserveBody) bool {
	p := plainJSON{b: data}
	if !p.byte('{') {
		return false
	}
	if p.peek('}') {
		return p.end()
	}
	var seen [4]bool
	for {
		key, ok := p.key()
		if !ok {
			return false
		}
		field := -1
		switch string(key) { // no allocation: compared in place
		case "cart_token":
			field = 0
			var s []byte
			if s, ok = p.str(); ok {
				body.CartToken = string(s)
			}
		case "shop_id":
			field = 1
			body.ShopID, ok = p.int()
		case "ttl_seconds":
			field = 2
			if p.null() {
				body.TTLSeconds = nil
			} else {
				var v int64
				v, ok = p.int()
				body.TTLSeconds = &v
			}
		case "lines":
			field = 3
			body.Lines, ok = p.lines()
		}
		if field < 0 || !ok || seen[field] {
			return false
		}
		seen[field] = true
		if p.peek('}') {
			return p.end()
		}
		if !p.byte(',') {
			return false
		}
	}
}

// plainJSON scans the plain subset of JSON parseReserve accepts.
type plainJSON struct {
	b []byte
	i int
}

func (p *plainJSON) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c after white space.
func (p *plainJSON) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// peek consumes c after white space when it is next.
func (p *plainJSON) peek(c byte) bool { return p.byte(c) }

// end reports whether only white space is left.
func (p *plainJSON) end() bool {
	p.space()
	return p.i == len(p.b)
}

// str reads a string of printable ASCII without escapes, as its bytes.
func (p *plainJSON) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start := p.i
	for ; p.i < len(p.b); p.i++ {
		switch c := p.b[p.i]; {
		case c == '"':
			p.i++
			return p.b[start : p.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// key reads an object key and its colon.
func (p *plainJSON) key() ([]byte, bool) {
	k, ok := p.str()
	return k, ok && p.byte(':')
}

// null consumes a null literal.
func (p *plainJSON) null() bool {
	p.space()
	if bytes.HasPrefix(p.b[p.i:], []byte("null")) {
		p.i += 4
		return true
	}
	return false
}

// int reads an integer as JSON writes it (-?(0|[1-9][0-9]*), no fraction or
// exponent) that fits an int64.
func (p *plainJSON) int() (int64, bool) {
	p.space()
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || p.b[digits] == '0' && p.i > digits+1 {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	v, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64) // no allocation: the conversion does not escape
	return v, err == nil
}

// lines reads the lines array: objects of inventory_item_id, quantity and
// group_ids, each at most once.
func (p *plainJSON) lines() ([]tandem.LineRequest, bool) {
	if !p.byte('[') {
		return nil, false
	}
	lines := make([]tandem.LineRequest, 0, 1)
	if p.peek(']') {
		return lines, true
	}
	for {
		var l tandem.LineRequest
		if !p.byte('{') {
			return nil, false
		}
		if !p.peek('}') {
			var seen [3]bool
			for {
				key, ok := p.key()
				if !ok {
					return nil, false
				}
				field := -1
				switch string(key) {
				case "inventory_item_id":
					field = 0
					l.ItemID, ok = p.int()
				case "quantity":
					field = 1
					l.Quantity, ok = p.int()
				case "group_ids":
					field = 2
					l.GroupIDs, ok = p.ints()
				}
				if field < 0 || !ok || seen[field] {
					return nil, false
				}
				seen[field] = true
				if p.peek('}') {
					break
				}
				if !p.byte(',') {
					return nil, false
				}
			}
		}
		lines = append(lines, l)
		if p.peek(']') {
			return lines, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// ints reads an array of integers.
func (p *plainJSON) ints() ([]int64, bool) {
	if !p.byte('[') {
		return nil, false
	}
	out := make([]int64, 0, 2)
	if p.peek(']') {
		return out, true
	}
	for {
		v, ok := p.int()
		if !ok {
			return nil, false
		}
		out = append(out, v)
		if p.peek(']') {
			return out, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}
