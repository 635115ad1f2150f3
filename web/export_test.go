package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http/httptest"

	"github.com/tandemhq/tandem"
)

// AppendReservationAnswer appends the checkout API's answer for res as
// writeReservation encodes it; EncodeReservationAnswer as encoding/json's
// Encoder does, the reference it must match byte for byte.
func AppendReservationAnswer(b []byte, res *tandem.Reservation) []byte {
	return appendReservation(b, toReservationJSON(res))
}

func EncodeReservationAnswer(res *tandem.Reservation) ([]byte, error) {
	return encodeJSONReference(toReservationJSON(res))
}

// encodeJSONReference is what writeJSON writes for v.
func encodeJSONReference(v any) ([]byte, error) {
	var b bytes.Buffer
	err := json.NewEncoder(&b).Encode(v)
	return b.Bytes(), err
}

// ParseReserveFast parses a reserve body on decodeReserve's fast path; ok
// is false when it leaves the body to encoding/json.
func ParseReserveFast(data []byte) (body any, ok bool) {
	var b reserveBody
	ok = parseReserve(data, &b)
	return b, ok
}

// DecodeReserveStrict decodes a reserve body as decodeJSON does.
func DecodeReserveStrict(data []byte) (body any, err error) {
	var b reserveBody
	err = decodeStrict(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(data)), &b)
	return b, err
}
