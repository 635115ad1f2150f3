package web_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tandemhq/tandem"
)

// cart builds a reservation body with lines as given (raw JSON).
func cart(fields, lines string) string {
	if fields != "" {
		fields = "," + fields
	}
	return `{"cart_token":"c-1","shop_id":1` + fields + `,"lines":[` + lines + `]}`
}

// line builds one line (raw JSON values).
func line(item, qty, groups string) string {
	return `{"inventory_item_id":` + item + `,"quantity":` + qty + `,"group_ids":[` + groups + `]}`
}

// repeatJoin returns n copies of f(i) joined by commas.
func repeatJoin(n int, f func(i int) string) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = f(i)
	}
	return strings.Join(parts, ",")
}

// TestBadRequests sends bad requests to both APIs and checks the exact
// status and code, and that the service was never called: bad input
// changes nothing.
func TestBadRequests(t *testing.T) {
	okLine := line("100", "2", "1,2")
	ids := func(i int) string { return fmt.Sprint(i + 1) }
	const (
		checkout = "checkout"
		admin    = "admin"
	)
	tests := []struct {
		name   string
		api    string
		rq     req
		status int
		code   string
	}{
		// POST /v1/reservations
		{"MalformedJSON", checkout, req{method: "POST", target: "/v1/reservations", body: `{"cart_token":`}, 400, tandem.EINVALID},
		{"NotJSONAtAll", checkout, req{method: "POST", target: "/v1/reservations", body: `cart_token=c-1`}, 400, tandem.EINVALID},
		{"TrailingJSON", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine) + `{}`}, 400, tandem.EINVALID},
		{"TrailingGarbage", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine) + ` x`}, 400, tandem.EINVALID},
		{"UnknownField", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"coupon":"FREE"`, okLine)}, 400, tandem.EINVALID},
		{"UnknownLineField", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", `{"inventory_item_id":1,"quantity":1,"group_ids":[1],"group_id":1}`)}, 400, tandem.EINVALID},
		{"UpperCaseField", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"cart_token"`, `"CART_TOKEN"`, 1)}, 400, tandem.EINVALID},
		{"MixedCaseField", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id"`, `"Shop_Id"`, 1)}, 400, tandem.EINVALID},
		{"MixedCaseLineField", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", `{"Inventory_Item_Id":1,"quantity":1,"group_ids":[1]}`)}, 400, tandem.EINVALID},
		{"DuplicateField", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"shop_id":2`, okLine)}, 400, tandem.EINVALID},
		{"CaseFoldedDuplicateField", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"SHOP_ID":2`, okLine)}, 400, tandem.EINVALID},
		{"InvalidUTF8", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"c-1"`, "\"c-\xff\"", 1)}, 400, tandem.EINVALID},
		{"OnHandUpperCase", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"ON_HAND":1}`}, 400, tandem.EINVALID},
		{"EmptyBody", checkout, req{method: "POST", target: "/v1/reservations", contentType: "application/json"}, 400, tandem.EINVALID},
		{"ArrayBody", checkout, req{method: "POST", target: "/v1/reservations", body: `[]`}, 400, tandem.EINVALID},
		{"NullBody", checkout, req{method: "POST", target: "/v1/reservations", body: `null`}, 400, tandem.EINVALID},
		{"ShopIDZero", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id":1`, `"shop_id":0`, 1)}, 400, tandem.EINVALID},
		{"ShopIDNegative", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id":1`, `"shop_id":-1`, 1)}, 400, tandem.EINVALID},
		{"ShopIDOverflow", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id":1`, `"shop_id":9223372036854775808`, 1)}, 400, tandem.EINVALID},
		{"ShopIDFraction", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id":1`, `"shop_id":1.5`, 1)}, 400, tandem.EINVALID},
		{"ShopIDString", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"shop_id":1`, `"shop_id":"1"`, 1)}, 400, tandem.EINVALID},
		{"ItemIDZero", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("0", "1", "1"))}, 400, tandem.EINVALID},
		{"QuantityZero", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "0", "1"))}, 400, tandem.EINVALID},
		{"Quantity1001", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1001", "1"))}, 400, tandem.EINVALID},
		{"QuantityExponentOverflow", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1e30", "1"))}, 400, tandem.EINVALID},
		{"QuantityHugeOverflow", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "123456789012345678901234567890", "1"))}, 400, tandem.EINVALID},
		{"GroupIDNegative", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1", "-3"))}, 400, tandem.EINVALID},
		{"TTLZero", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"ttl_seconds":0`, okLine)}, 400, tandem.EINVALID},
		{"TTL3601", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"ttl_seconds":3601`, okLine)}, 400, tandem.EINVALID},
		{"TTLOverflowsDuration", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"ttl_seconds":9223372036854775807`, okLine)}, 400, tandem.EINVALID},
		{"DuplicateItems", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine+","+line("100", "1", "3"))}, 400, tandem.EINVALID},
		{"DuplicateGroups", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1", "2,2"))}, 400, tandem.EINVALID},
		{"NoLines", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", "")}, 400, tandem.EINVALID},
		{"NoGroups", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1", ""))}, 400, tandem.EINVALID},
		{"101Lines", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", repeatJoin(101, func(i int) string { return line(ids(i), "1", "1") }))}, 400, tandem.EINVALID},
		{"21Groups", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", line("1", "1", repeatJoin(21, ids)))}, 400, tandem.EINVALID},
		{"BadCartTokenChars", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"c-1"`, `"c 1/x"`, 1)}, 400, tandem.EINVALID},
		{"CartTokenTooLong", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"c-1"`, `"`+strings.Repeat("a", 129)+`"`, 1)}, 400, tandem.EINVALID},
		{"CartTokenEmpty", checkout, req{method: "POST", target: "/v1/reservations", body: strings.Replace(cart("", okLine), `"c-1"`, `""`, 1)}, 400, tandem.EINVALID},
		{"OversizedBody", checkout, req{method: "POST", target: "/v1/reservations", body: cart(`"pad":"`+strings.Repeat("x", 70<<10)+`"`, okLine)}, 413, tandem.EPAYLOADTOOLARGE},
		{"OversizedWhiteSpace", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine) + strings.Repeat(" ", 70<<10)}, 413, tandem.EPAYLOADTOOLARGE},
		{"WrongContentType", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine), contentType: "text/plain"}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		{"FormContentType", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine), contentType: "application/x-www-form-urlencoded"}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		{"BadContentType", checkout, req{method: "POST", target: "/v1/reservations", body: cart("", okLine), contentType: "application/json; ===="}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		// claim, release, get
		{"ClaimMissingShopID", checkout, req{method: "POST", target: "/v1/reservations/c-1/claim"}, 400, tandem.EINVALID},
		{"ReleaseMissingShopID", checkout, req{method: "DELETE", target: "/v1/reservations/c-1"}, 400, tandem.EINVALID},
		{"GetShopIDNotNumber", checkout, req{method: "GET", target: "/v1/reservations/c-1?shop_id=abc"}, 400, tandem.EINVALID},
		{"GetShopIDLeadingZero", checkout, req{method: "GET", target: "/v1/reservations/c-1?shop_id=01"}, 400, tandem.EINVALID},
		{"GetShopIDPlusSign", checkout, req{method: "GET", target: "/v1/reservations/c-1?shop_id=%2B1"}, 400, tandem.EINVALID},
		{"GetShopIDOverflow", checkout, req{method: "GET", target: "/v1/reservations/c-1?shop_id=9223372036854775808"}, 400, tandem.EINVALID},
		{"GetShopIDTwice", checkout, req{method: "GET", target: "/v1/reservations/c-1?shop_id=1&shop_id=2"}, 400, tandem.EINVALID},
		{"GetBadCartToken", checkout, req{method: "GET", target: "/v1/reservations/c%20x?shop_id=1"}, 400, tandem.EINVALID},
		{"ClaimEncodedSlashToken", checkout, req{method: "POST", target: "/v1/reservations/c%2F1/claim?shop_id=1"}, 400, tandem.EINVALID},
		{"ReleaseLongToken", checkout, req{method: "DELETE", target: "/v1/reservations/" + strings.Repeat("a", 129) + "?shop_id=1"}, 400, tandem.EINVALID},
		// inventory
		{"OnHandNegative", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":-1}`}, 400, tandem.EINVALID},
		{"OnHandTooLarge", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":10000001}`}, 400, tandem.EINVALID},
		{"OnHandOverflow", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":18446744073709551616}`}, 400, tandem.EINVALID},
		{"OnHandMissing", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{}`}, 400, tandem.EINVALID},
		{"OnHandNull", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":null}`}, 400, tandem.EINVALID},
		{"OnHandUnknownField", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":1,"reserved":0}`}, 400, tandem.EINVALID},
		{"OnHandWrongContentType", checkout, req{method: "PUT", target: "/v1/inventory/1/100/1", body: `{"on_hand":1}`, contentType: "text/json"}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		{"InventoryShopIDZero", checkout, req{method: "GET", target: "/v1/inventory/0/100/1"}, 400, tandem.EINVALID},
		{"InventoryItemIDNegative", checkout, req{method: "GET", target: "/v1/inventory/1/-100/1"}, 400, tandem.EINVALID},
		{"InventoryGroupIDOverflow", checkout, req{method: "PUT", target: "/v1/inventory/1/100/99999999999999999999", body: `{"on_hand":1}`}, 400, tandem.EINVALID},
		// admin: auth first
		{"AdminNoToken", admin, req{method: "GET", target: "/admin/pods"}, 401, tandem.EUNAUTHORIZED},
		{"AdminWrongToken", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r"}`, token: "guess"}, 401, tandem.EUNAUTHORIZED},
		{"AdminNoTokenMetrics", admin, req{method: "GET", target: "/metrics"}, 401, tandem.EUNAUTHORIZED},
		// admin: bodies
		{"UnknownMode", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"postgres","reason":"r"}`, token: adminToken}, 400, tandem.EINVALID},
		{"MissingMode", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"reason":"r"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeMissingReason", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"shadow"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeBlankReason", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"shadow","reason":"  "}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeReason501", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"shadow","reason":"` + strings.Repeat("é", 501) + `"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeActorTooLong", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"shadow","reason":"r","actor":"` + strings.Repeat("a", 129) + `"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeForceNotBool", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r","force":"yes"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeUnknownField", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r","gates":false}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeWrongContentType", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r"}`, contentType: "text/plain", token: adminToken}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		{"ModeOversized", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"` + strings.Repeat("r", 70<<10) + `"}`, token: adminToken}, 413, tandem.EPAYLOADTOOLARGE},
		{"ModeUpperCaseField", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"MODE":"mysql","reason":"r"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ModeMixedCaseForce", admin, req{method: "PUT", target: "/admin/pods/pod-a/mode", body: `{"mode":"mysql","reason":"r","Force":true}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillMixedCaseReason", admin, req{method: "POST", target: "/admin/killswitch", body: `{"Reason":"r"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ResyncUpperCaseFrom", admin, req{method: "POST", target: "/admin/pods/pod-a/resync", body: `{"reason":"r","FROM":"mysql"}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillMissingReason", admin, req{method: "POST", target: "/admin/killswitch", body: `{"pods":["pod-a"]}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillDuplicatePods", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":["pod-a","pod-a"]}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillEmptyPodName", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":[""]}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillEmptyPodList", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":[]}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillNullPods", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":null}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillPodsNotAList", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":"pod-a"}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillBlankPodName", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r","pods":["pod-a"," "]}`, token: adminToken}, 400, tandem.EINVALID},
		{"UnkillEmptyPodList", admin, req{method: "DELETE", target: "/admin/killswitch", body: `{"reason":"r","pods":[]}`, token: adminToken}, 400, tandem.EINVALID},
		{"UnkillDuplicatePods", admin, req{method: "DELETE", target: "/admin/killswitch", body: `{"reason":"r","pods":["pod-a","pod-a"]}`, token: adminToken}, 400, tandem.EINVALID},
		{"KillTrailingJSON", admin, req{method: "POST", target: "/admin/killswitch", body: `{"reason":"r"}{"reason":"again"}`, token: adminToken}, 400, tandem.EINVALID},
		{"UnkillNoBody", admin, req{method: "DELETE", target: "/admin/killswitch", contentType: "application/json", token: adminToken}, 400, tandem.EINVALID},
		{"UnkillNoContentType", admin, req{method: "DELETE", target: "/admin/killswitch", token: adminToken}, 415, tandem.EUNSUPPORTEDMEDIATYPE},
		{"AuditMissingReason", admin, req{method: "POST", target: "/admin/pods/pod-a/audit", body: `{}`, token: adminToken}, 400, tandem.EINVALID},
		{"ResyncFromRedis", admin, req{method: "POST", target: "/admin/pods/pod-a/resync", body: `{"reason":"r","from":"redis"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ResyncMissingFrom", admin, req{method: "POST", target: "/admin/pods/pod-a/resync", body: `{"reason":"r"}`, token: adminToken}, 400, tandem.EINVALID},
		{"ResyncMissingReason", admin, req{method: "POST", target: "/admin/pods/pod-a/resync", body: `{"from":"mysql"}`, token: adminToken}, 400, tandem.EINVALID},
		// admin: queries
		{"DivergencesLimitZero", admin, req{method: "GET", target: "/admin/divergences?limit=0", token: adminToken}, 400, tandem.EINVALID},
		{"DivergencesLimit1001", admin, req{method: "GET", target: "/admin/divergences?limit=1001", token: adminToken}, 400, tandem.EINVALID},
		{"DivergencesLimitNotNumber", admin, req{method: "GET", target: "/admin/divergences?limit=ten", token: adminToken}, 400, tandem.EINVALID},
		{"DivergencesLimitOverflow", admin, req{method: "GET", target: "/admin/divergences?limit=99999999999999999999", token: adminToken}, 400, tandem.EINVALID},
		{"DivergencesUnknownKind", admin, req{method: "GET", target: "/admin/divergences?kind=bogus", token: adminToken}, 400, tandem.EINVALID},
		{"AuditLogLimitNegative", admin, req{method: "GET", target: "/admin/audit-log?limit=-1", token: adminToken}, 400, tandem.EINVALID},
		{"AuditLogLimitEmpty", admin, req{method: "GET", target: "/admin/audit-log?limit=", token: adminToken}, 400, tandem.EINVALID},
		{"PodNameWithSpace", admin, req{method: "GET", target: "/admin/pods/pod%20a", token: adminToken}, 400, tandem.EINVALID},
	}
	if len(tests) < 30 {
		t.Fatalf("got %d cases, want at least 30", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				w     *httptest.ResponseRecorder
				calls []string
			)
			switch tc.api {
			case checkout:
				h, f := newCheckout(t)
				w = do(t, h, tc.rq)
				calls = f.Names()
			case admin:
				h, f := newAdmin(t)
				w = do(t, h, tc.rq)
				calls = f.Names()
			}
			mustError(t, w, tc.status, tc.code)
			if len(calls) != 0 {
				t.Fatalf("got service calls %v, want none", calls)
			}
		})
	}
}
