package codec

import (
	"llmgate/internal/api/anthropic"
	"llmgate/internal/apierror"
	"llmgate/internal/translate"
)

// A request may grow on its way through the gateway: a tool_reference block
// brings the referenced tool's definition into the conversation, and a
// /tokenize body re-encodes the prompt. Both are bounded by what the client
// sent, so a small body cannot make the gateway build (and send) a large
// one: a 30 MB Messages body of one deferred tool and one tool_reference
// took 2.7 GB and sent 371 MB upstream.

// maxExpansion is the most the definitions tool_reference blocks bring in
// may add to a request of bodyLen bytes: half of it plus 1 MiB. A tool
// search loads a few definitions of a few KB each; a request whose
// referenced tools are most of its body is refused before anything is
// built.
func maxExpansion(bodyLen int) int64 { return int64(bodyLen)/2 + 1<<20 }

// MaxTokenizeBody is the largest /tokenize body the gateway sends to count
// this request's prompt: twice the client's body plus 1 MiB. A larger one
// (the JSON encoding of some text grows it sixfold) is not sent; the count
// is estimated instead.
func (r *Request) MaxTokenizeBody() int { return 2*len(r.Body) + 1<<20 }

// checkExpansion refuses a Messages or count_tokens request whose
// tool_reference blocks would bring in more than maxExpansion allows, before
// the translation builds it.
func (r *Request) checkExpansion(m *anthropic.MessagesRequest) error {
	n, most := translate.ToolReferenceBytes(m), maxExpansion(len(r.Body))
	if n <= most {
		return nil
	}
	return param(apierror.InvalidRequest("tool_reference_too_large",
		"the tool definitions that tool_reference blocks load into the conversation come to %d bytes, more than the gateway adds to a request of %d bytes (half its size plus 1 MiB, %d bytes): load fewer or smaller deferred tools, or shorten their descriptions",
		n, len(r.Body), most), "messages")
}
