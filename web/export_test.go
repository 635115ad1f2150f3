package web

import (
	"bytes"
	"encoding/json"

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
