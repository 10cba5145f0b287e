#include "client/cpp/client.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "client/cpp/address.h"
#include "core/base/status_macros.h"

namespace conveyor::client {

// Inline batches travel in one message.
constexpr int kMaxMessageBytes = 1 << 30;

absl::StatusOr<Client> Client::Create(std::string_view address, ClientOptions options) {
  for (char c : options.token) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError("a token is one line of printable ASCII without spaces");
    }
  }
  Client client;
  ASSIGN_OR_RETURN(client.target_, GrpcTarget(address));
  client.data_host_ = TcpHost(client.target_);
  client.token_ = std::move(options.token);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  client.channel_ =
      grpc::CreateCustomChannel(client.target_, grpc::InsecureChannelCredentials(), args);
  client.stub_ = v1::Conveyor::NewStub(client.channel_);
  return client;
}

absl::StatusOr<std::vector<v1::PipelineInfo>> Client::ListPipelines(absl::Duration timeout) const {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
  v1::ListPipelinesResponse response;
  const grpc::Status status = stub_->ListPipelines(&context, {}, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("ListPipelines on ", target_, ": ", status.error_message()));
  }
  return std::vector<v1::PipelineInfo>(response.pipelines().begin(), response.pipelines().end());
}

absl::StatusOr<std::unique_ptr<Stream>> Client::OpenStream(const StreamOptions& options) const {
  return Stream::Open(channel_, *stub_, options, data_host_, token_);
}

}  // namespace conveyor::client
