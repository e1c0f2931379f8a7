package redact_test

import (
	"strings"
	"testing"

	"llmgate/internal/redact"
)

func TestSecrets_HidesPasswordsInURLsAndDSNs(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		// URLs with user information.
		{"postgres://llm:s3cret@db.internal:5432/llmgate?sslmode=disable", "postgres://llm:xxxxx@db.internal:5432/llmgate?sslmode=disable"},
		{"postgresql://llm:s3cret@db/llmgate", "postgresql://llm:xxxxx@db/llmgate"},
		{"redis://default:hunter2@cache:6379/0", "redis://default:xxxxx@cache:6379/0"},
		{"redis://:hunter2@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
		{"rediss://user:hunter2@cache:6380", "rediss://user:xxxxx@cache:6380"},
		{"postgres://llm:p@ss:w@rd@db/x", "postgres://llm:xxxxx@db/x"},  // '@' and ':' inside the password
		{"postgres://llm:pa/ss@db/x", "postgres://llm:xxxxx@db/x"},      // '/' inside the password
		{"postgres://llm:pa%2Fss%40@db/x", "postgres://llm:xxxxx@db/x"}, // escaped
		{"http://proxy-user:proxy-pass@proxy:3128", "http://proxy-user:xxxxx@proxy:3128"},
		// Query-string passwords.
		{"postgres://db/llmgate?user=llm&password=s3cret&sslmode=disable", "postgres://db/llmgate?user=llm&password=xxxxx&sslmode=disable"},
		{"postgres://db/llmgate?sslpassword=s3cret", "postgres://db/llmgate?sslpassword=xxxxx"},
		{"postgres://db/x?PASSWORD=s3cret", "postgres://db/x?PASSWORD=xxxxx"},
		// libpq keyword/value DSNs.
		{"host=db user=llm password=s3cret dbname=llmgate", "host=db user=llm password=xxxxx dbname=llmgate"},
		{"host=db password = 's3 cr\\'et' dbname=x", "host=db password = xxxxx dbname=x"},
		{"pwd=s3cret;server=db", "pwd=xxxxx;server=db"},
		// In running text: an error message, a log line, several URLs.
		{`connect to postgres postgres://llm:s3cret@db/x: dial tcp: connection refused`, `connect to postgres postgres://llm:xxxxx@db/x: dial tcp: connection refused`},
		{`redis URL "redis://:a@h:1/0": bad; fallback redis://u:b@h2`, `redis URL "redis://:xxxxx@h:1/0": bad; fallback redis://u:xxxxx@h2`},
		// Nothing to hide: unchanged.
		{"postgres://db.internal:5432/llmgate?sslmode=disable", "postgres://db.internal:5432/llmgate?sslmode=disable"},
		{"postgres://llm@db/llmgate", "postgres://llm@db/llmgate"}, // a user name alone
		{"postgres://db/x?application_name=me@example.com", "postgres://db/x?application_name=me@example.com"},
		{"/var/lib/llmgate/llmgate.db", "/var/lib/llmgate/llmgate.db"},
		{"failed to connect to `user=postgres database=test`", "failed to connect to `user=postgres database=test`"},
		{"", ""},
	} {
		if got := redact.Secrets(c.in); got != c.want {
			t.Errorf("Secrets(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
		for _, secret := range []string{"s3cret", "hunter2", "p@ss", "pa/ss", "proxy-pass", "s3 cr"} {
			if strings.Contains(c.in, secret) && strings.Contains(redact.Secrets(c.in), secret) {
				t.Errorf("Secrets(%q) still shows %q", c.in, secret)
			}
		}
	}
}
