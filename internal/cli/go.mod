module github.com/pelwarden/pelwarden/internal/cli

go 1.26.0

replace (
	github.com/pelwarden/pelwarden => ../..
	github.com/pelwarden/pelwarden/driver/prommetrics => ../../driver/prommetrics
	github.com/pelwarden/pelwarden/internal/bench => ../../internal/bench
	github.com/pelwarden/pelwarden/internal/testserver => ../../internal/testserver
	github.com/pelwarden/pelwarden/pelwardentest => ../../pelwardentest
)

require (
	github.com/pelwarden/pelwarden v0.0.0-00010101000000-000000000000
	github.com/pelwarden/pelwarden/internal/bench v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.1.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/Rican7/retry v0.3.1 // indirect
	github.com/ThreeDotsLabs/watermill v1.5.1 // indirect
	github.com/ThreeDotsLabs/watermill-redisstream v1.4.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/golang/protobuf v1.5.4 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pelwarden/pelwarden/internal/dashboard v0.0.0-00010101000000-000000000000
	github.com/pkg/errors v0.9.1 // indirect
	github.com/vmihailenco/msgpack v4.0.4+incompatible // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.49.0 // indirect
	google.golang.org/appengine v1.6.8 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/pelwarden/pelwarden/internal/dashboard => ../dashboard
