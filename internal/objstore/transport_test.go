package objstore

import (
	"context"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
)

// TestConnectionsSizeTransport: the HTTP transport keeps an idle connection
// for each of the Connections parallel requests to the store's one host
// (--connections reaches it), so that none is closed and dialled again.
func TestConnectionsSizeTransport(t *testing.T) {
	for conns, want := range map[int]int{0: 128, 8: 16, 300: 600} {
		b, err := New(context.Background(), URL{Scheme: "s3", Bucket: "bkt"}, Options{Connections: conns})
		if err != nil {
			t.Fatal(err)
		}
		hc, ok := b.c.Options().HTTPClient.(*awshttp.BuildableClient)
		if !ok {
			t.Fatalf("HTTP client %T", b.c.Options().HTTPClient)
		}
		if got := hc.GetTransport().MaxIdleConnsPerHost; got < want {
			t.Errorf("Connections %d: %d idle connections per host, want %d", conns, got, want)
		}
	}
}
