package web

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// answerBuffers are the byte buffers the reservation answers are encoded
// into, reused across requests.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// writeReservation writes a reservation answer: the bytes json.Encoder
// would write for v (the checkout API's hottest answer), encoded without
// reflection into a reused buffer. A value it cannot encode the same way
// (a time outside years 0-9999) goes through writeJSON.
func writeReservation(w http.ResponseWriter, status int, v reservationJSON) {
	if v.ExpiresAt != nil && (v.ExpiresAt.Year() < 0 || v.ExpiresAt.Year() > 9999) {
		writeJSON(w, status, v)
		return
	}
	bp := answerBuffers.Get().(*[]byte)
	b := appendReservation((*bp)[:0], v)
	h := w.Header()
	h["Content-Type"] = jsonContentType
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client went away mid-answer: nobody left to tell
	if cap(b) <= 64<<10 {
		*bp = b
		answerBuffers.Put(bp)
	}
}

// appendReservation appends v as encoding/json's Encoder writes it: the
// fields in declaration order, HTML-safe strings, and a final newline.
func appendReservation(b []byte, v reservationJSON) []byte {
	b = append(b, `{"cart_token":`...)
	b = appendJSONString(b, v.CartToken)
	b = append(b, `,"shop_id":`...)
	b = strconv.AppendInt(b, v.ShopID, 10)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(v.Status))
	b = append(b, `,"pod":`...)
	b = appendJSONString(b, v.Pod)
	b = append(b, `,"source_of_truth":`...)
	b = appendJSONString(b, v.SourceOfTruth)
	b = append(b, `,"expires_at":`...)
	if v.ExpiresAt == nil {
		b = append(b, "null"...)
	} else {
		b = v.ExpiresAt.AppendFormat(append(b, '"'), time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, `,"lines":`...)
	if v.Lines == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, l := range v.Lines {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"inventory_item_id":`...)
			b = strconv.AppendInt(b, l.ItemID, 10)
			b = append(b, `,"quantity":`...)
			b = strconv.AppendInt(b, l.Quantity, 10)
			b = append(b, `,"group_id":`...)
			b = strconv.AppendInt(b, l.GroupID, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"replayed":`...)
	b = strconv.AppendBool(b, v.Replayed)
	return append(b, "}\n"...)
}

// appendJSONString appends s quoted as encoding/json does. Plain printable
// ASCII (every token, pod and store name tandem accepts) is copied as it
// is; anything else (quotes, backslashes, control bytes, the HTML-escaped
// <, > and &, non-ASCII) is left to encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
