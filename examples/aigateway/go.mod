module github.com/redlimit/redlimit/examples/aigateway

go 1.25.0

replace (
	github.com/redlimit/redlimit => ../../
	github.com/redlimit/redlimit/grpclimit => ../../grpclimit
	github.com/redlimit/redlimit/promlimit => ../../promlimit
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/redlimit/redlimit v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
