package ledger

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"llmgate/internal/jsonscan"
	"llmgate/internal/usage"
)

// The spool holds one record per line as a JSON object whose members are
// the Record's field names, as encoding/json writes them, so files from
// earlier versions stay readable. appendRecord writes that form without
// reflection: it runs on every request, before the answer's last byte.

// appendRecord appends r as one JSON line (with its newline) to b.
func appendRecord(b []byte, r *usage.Record) []byte {
	b = append(b, `{"ID":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"ClientRequestID":`...)
	b = appendJSONString(b, r.ClientRequestID)
	b = append(b, `,"Time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","KeyID":`...)
	b = appendJSONString(b, r.KeyID)
	b = append(b, `,"Model":`...)
	b = appendJSONString(b, r.Model)
	b = append(b, `,"ServedModel":`...)
	b = appendJSONString(b, r.ServedModel)
	b = append(b, `,"Backend":`...)
	b = appendJSONString(b, r.Backend)
	b = append(b, `,"UpstreamModel":`...)
	b = appendJSONString(b, r.UpstreamModel)
	b = append(b, `,"Endpoint":`...)
	b = appendJSONString(b, r.Endpoint)
	b = append(b, `,"Status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"ErrorType":`...)
	b = appendJSONString(b, r.ErrorType)
	b = append(b, `,"PromptTokens":`...)
	b = strconv.AppendInt(b, int64(r.PromptTokens), 10)
	b = append(b, `,"CompletionTokens":`...)
	b = strconv.AppendInt(b, int64(r.CompletionTokens), 10)
	b = append(b, `,"CachedTokens":`...)
	b = strconv.AppendInt(b, int64(r.CachedTokens), 10)
	b = append(b, `,"TTFT":`...)
	b = strconv.AppendInt(b, int64(r.TTFT), 10)
	b = append(b, `,"Latency":`...)
	b = strconv.AppendInt(b, int64(r.Latency), 10)
	b = append(b, `,"Estimated":`...)
	b = strconv.AppendBool(b, r.Estimated)
	b = append(b, `,"Stream":`...)
	b = strconv.AppendBool(b, r.Stream)
	b = append(b, `,"CostUSD":`...)
	cost := r.CostUSD
	if math.IsNaN(cost) || math.IsInf(cost, 0) { // not representable in JSON
		cost = 0
	}
	b = strconv.AppendFloat(b, cost, 'g', -1, 64)
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string. Bytes above 0x7f pass as
// they are (JSON text is UTF-8; encoding/json, which reads the journal,
// replaces invalid bytes when it decodes them).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = jsonscan.AppendEscaped(b, s)
	return append(b, '"')
}

// decodeRecord reads one spool line. Lines written before records had a
// ClientRequestID get the one LegacyClientRequestID gives, as the database
// migrations do for stored rows.
func decodeRecord(line []byte, r *usage.Record) error {
	*r = usage.Record{}
	if err := json.Unmarshal(line, r); err != nil {
		return err
	}
	if !bytes.Contains(line, []byte(`"ClientRequestID"`)) {
		r.ClientRequestID = usage.LegacyClientRequestID(r.ID)
	}
	return nil
}
