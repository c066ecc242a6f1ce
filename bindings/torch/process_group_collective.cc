// The c10d backend "collective" (process_group_collective.h).
//
// Every operation becomes a CollectiveWork queued to the group's worker thread, so the caller
// returns at once. The worker issues the library calls on its host stream and waits for the
// stream; the library's progress threads move the data. The Work completes (and its future, which
// DDP's reducer chains on) when the stream has finished. Tensors that are not contiguous are
// copied into contiguous ones and their results copied back before completion.
#include "bindings/torch/process_group_collective.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace torch_collective {
namespace {

// A contiguous stand-in for a tensor (itself where it already is contiguous), copied back into
// the original by writeBack() when it is an output.
struct Contiguous {
  at::Tensor original;
  at::Tensor dense;
  explicit Contiguous(const at::Tensor& t) : original(t), dense(t.is_contiguous() ? t : t.contiguous()) {}
  void writeBack() const {
    if (!dense.is_same(original)) original.copy_(dense);
  }
  void* data() const { return dense.data_ptr(); }
  size_t bytes() const { return dense.numel() * dense.element_size(); }
};

std::string dtypeName(const at::Tensor& t) { return std::string(c10::toString(t.scalar_type())); }

void requireCpu(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "collective backend: ", what, " got a tensor on ", t.device().str(),
              ": this build of torch_collective takes CPU tensors (its PyTorch has no CUDA)");
  TORCH_CHECK(!t.is_sparse(), "collective backend: ", what, " does not take sparse tensors");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "collective backend: ", what, " takes one tensor per process, got ", tensors.size());
  requireCpu(tensors[0], what);
  return tensors[0];
}

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNKNOWN";
  }
}

// How the library reduces a tensor: its element type and the element count (complex tensors
// reduce as pairs of reals, which is exact for the sums and scalings allowed on them).
struct ReductionView {
  collDataType_t type;
  size_t countPerElement;  // 2 for complex
  at::ScalarType realType;
};

ReductionView reductionView(const at::Tensor& t, c10d::ReduceOp::RedOpType op, const char* what) {
  const bool sumLike = op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PREMUL_SUM;
  TORCH_CHECK(op == c10d::ReduceOp::SUM || op == c10d::ReduceOp::AVG || op == c10d::ReduceOp::PRODUCT ||
                  op == c10d::ReduceOp::MIN || op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::PREMUL_SUM,
              "collective backend: ", what, ": reduce op ", opName(op),
              " is not supported (SUM, AVG, PRODUCT, MIN, MAX and PREMUL_SUM are)");
  switch (t.scalar_type()) {
    case at::kFloat: return {collFloat32, 1, at::kFloat};
    case at::kDouble: return {collFloat64, 1, at::kDouble};
    case at::kHalf: return {collFloat16, 1, at::kHalf};
    case at::kBFloat16: return {collBfloat16, 1, at::kBFloat16};
    case at::kChar: return {collInt8, 1, at::kChar};
    case at::kByte: return {collUint8, 1, at::kByte};
    case at::kInt: return {collInt32, 1, at::kInt};
    case at::kLong: return {collInt64, 1, at::kLong};
    case at::kBool:
      // MAX is "any", MIN is "all" on 0/1 bytes; a sum could store 2 in a bool.
      TORCH_CHECK(op == c10d::ReduceOp::MAX || op == c10d::ReduceOp::MIN, "collective backend: ", what,
                  ": bool tensors reduce with MAX or MIN only, not ", opName(op));
      return {collUint8, 1, at::kByte};
    case at::kComplexFloat:
    case at::kComplexDouble:
      TORCH_CHECK(sumLike, "collective backend: ", what,
                  ": complex tensors reduce with SUM, AVG or PREMUL_SUM only, not ", opName(op));
      return t.scalar_type() == at::kComplexFloat ? ReductionView{collFloat32, 2, at::kFloat}
                                                  : ReductionView{collFloat64, 2, at::kDouble};
    default:
      TORCH_CHECK(false, "collective backend: ", what, ": dtype ", dtypeName(t),
                  " cannot be reduced (float32, float64, float16, bfloat16, int8, uint8, int32, int64, complex and "
                  "bool with MAX/MIN can)");
  }
}

// A reduction op ready for the library: the plain ops map one to one; PREMUL_SUM makes a
// per-call op with the factor converted to the tensor's (real) type, destroyed with this object.
class LibraryOp {
 public:
  LibraryOp(const c10d::ReduceOp& op, const ReductionView& view, const char* what) {
    switch (op.op_) {
      case c10d::ReduceOp::SUM: op_ = collSum; break;
      case c10d::ReduceOp::AVG: op_ = collAvg; break;
      case c10d::ReduceOp::PRODUCT: op_ = collProd; break;
      case c10d::ReduceOp::MIN: op_ = collMin; break;
      case c10d::ReduceOp::MAX: op_ = collMax; break;
      case c10d::ReduceOp::PREMUL_SUM: {
        auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
        TORCH_CHECK(supplement != nullptr, "collective backend: ", what, ": PREMUL_SUM without its factor");
        at::Tensor factor = supplement->tensor_factors.empty()
                                ? at::scalar_tensor(supplement->double_factor, at::TensorOptions().dtype(at::kDouble))
                                : supplement->tensor_factors.front();
        TORCH_CHECK(factor.numel() == 1 && factor.device().is_cpu(), "collective backend: ", what,
                    ": the PREMUL_SUM factor must be one number on the CPU");
        factor_ = factor.reshape({}).to(view.realType).contiguous();
        premul_ = true;
        break;
      }
      default: TORCH_CHECK(false, "collective backend: ", what, ": reduce op ", opName(op.op_), " is not supported");
    }
  }
  // The op for comm: PREMUL_SUM is made here (collScalarHostImmediate reads the factor now).
  collRedOp_t make(collComm_t comm, collDataType_t type) {
    if (!premul_) return op_;
    if (collRedOpCreatePreMulSum(&op_, factor_.data_ptr(), type, collScalarHostImmediate, comm) != collSuccess)
      throw std::runtime_error(std::string("collective backend: PREMUL_SUM: ") + collGetLastError(comm));
    comm_ = comm;
    return op_;
  }
  ~LibraryOp() {
    if (comm_ != nullptr) (void)collRedOpDestroy(op_, comm_);
  }
  LibraryOp(const LibraryOp&) = delete;
  LibraryOp& operator=(const LibraryOp&) = delete;

 private:
  collRedOp_t op_ = collSum;
  bool premul_ = false;
  at::Tensor factor_;
  collComm_t comm_ = nullptr;
};

// The tensors of a list as one flat buffer of the first tensor's dtype (sizes may differ).
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of the flat buffer back into the tensors.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

void checkSameLayout(const at::Tensor& reference, const at::Tensor& t, const char* what, const char* role) {
  TORCH_CHECK(t.scalar_type() == reference.scalar_type(), "collective backend: ", what, ": every ", role,
              " tensor must have dtype ", dtypeName(reference), ", got ", dtypeName(t));
  TORCH_CHECK(t.numel() == reference.numel(), "collective backend: ", what, ": every ", role, " tensor must have ",
              reference.numel(), " elements, got ", t.numel());
  requireCpu(t, what);
}

// The single-tensor forms (all_gather_into_tensor, reduce_scatter_tensor): `whole` holds one
// `piece` per rank, of the same dtype, both on the CPU.
void checkWholeAndPiece(const at::Tensor& whole, const at::Tensor& piece, int size, const char* what,
                        const char* wholeRole) {
  requireCpu(whole, what);
  requireCpu(piece, what);
  const char* pieceRole = std::strcmp(wholeRole, "output") == 0 ? "input" : "output";
  TORCH_CHECK(whole.scalar_type() == piece.scalar_type(), "collective backend: ", what, ": ", wholeRole, " dtype ",
              dtypeName(whole), " differs from ", pieceRole, " dtype ", dtypeName(piece));
  TORCH_CHECK(whole.numel() == piece.numel() * size, "collective backend: ", what, ": the ", wholeRole, " must hold ",
              size, " x ", piece.numel(), " elements, it holds ", whole.numel());
}

// The root's list of gather outputs or scatter inputs (one per rank, each like `like`); the other
// ranks pass none and get an empty list.
std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>>& lists, const at::Tensor& like, bool isRoot,
                                 int size, const char* what, const char* role) {
  if (!isRoot) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "collective backend: ", what,
                ": only the root passes ", role, " tensors");
    return {};
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size, "collective backend: ", what,
              " needs one list of ", size, " ", role, " tensors on the root");
  for (const auto& t : lists[0]) checkSameLayout(like, t, what, role);
  return lists[0];
}

// The bytes before each send's payload: its tag and size, checked by the receiver.
struct MessageHeader {
  int64_t tag;
  int64_t bytes;
};

}  // namespace

// ---- CollectiveWork ----------------------------------------------------------------------

CollectiveWork::CollectiveWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, std::function<void()> body)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      body_(std::move(body)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

void CollectiveWork::run() {
  std::exception_ptr error;
  try {
    if (body_) body_();
  } catch (...) {
    error = std::current_exception();
  }
  body_ = nullptr;  // releases the tensors the body holds
  complete(error);
}

void CollectiveWork::fail(std::exception_ptr error) {
  body_ = nullptr;
  complete(std::move(error));
}

void CollectiveWork::complete(std::exception_ptr error) {
  // The future first: DDP chains on it, and wait() must not return before it holds the result.
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

// ---- construction and the worker ------------------------------------------------------------

namespace {
void runAsIs(const std::function<void()>& wait) { wait(); }
}  // namespace

void (*ProcessGroupCollective::outsideInterpreterLock)(const std::function<void()>&) = runAsIs;

c10::intrusive_ptr<ProcessGroupCollective> ProcessGroupCollective::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                                          int rank, int size,
                                                                          std::chrono::milliseconds timeout,
                                                                          std::vector<int64_t> globalRanks) {
  // One key per communicator made through this store (PyTorch prefixes the store per group).
  const std::string key = "torch_collective/unique_id";
  collUniqueId id;
  if (rank == 0) {
    if (collGetUniqueId(&id) != collSuccess)
      throw std::runtime_error(std::string("collective backend: collGetUniqueId failed: ") + collGetLastError(nullptr));
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id.internal)));
  } else {
    store->wait({key}, timeout);
    const std::vector<uint8_t> bytes = store->get(key);
    TORCH_CHECK(bytes.size() == sizeof(id.internal), "collective backend: the store holds a unique id of ",
                bytes.size(), " bytes, expected ", sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), bytes.size());
  }
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::min<int64_t>(timeout.count(), INT32_MAX));
  config.commName = "torch";
  collComm_t comm = nullptr;
  const collResult_t result = collCommInitRankConfig(&comm, size, id, rank, &config);
  if (result != collSuccess)
    throw std::runtime_error(std::string("collective backend: communicator creation failed on rank ") +
                             std::to_string(rank) + " of " + std::to_string(size) + ": " + collGetErrorString(result) +
                             ": " + collGetLastError(nullptr));
  return c10::make_intrusive<ProcessGroupCollective>(comm, rank, size, timeout, std::move(globalRanks));
}

ProcessGroupCollective::ProcessGroupCollective(collComm_t comm, int rank, int size, std::chrono::milliseconds timeout,
                                               std::vector<int64_t> globalRanks)
    : BackendBase(rank, size), comm_(comm), timeout_(timeout), globalRanks_(std::move(globalRanks)) {
  if (collHostStreamCreate(&stream_) != collSuccess) {
    (void)collCommDestroy(comm_);
    throw std::runtime_error(std::string("collective backend: host stream: ") + collGetLastError(nullptr));
  }
  worker_ = std::thread([this] { workerLoop(); });
}

ProcessGroupCollective::~ProcessGroupCollective() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queued_.notify_all();
  // Queued work completes first, as with gloo. The worker may drop the last reference to a tensor
  // that owns a Python object, which takes the interpreter lock: the join must not hold it.
  if (worker_.joinable()) outsideInterpreterLock([this] { worker_.join(); });
  (void)collHostStreamDestroy(stream_);
  if (!aborted_.load()) {
    collResult_t asyncError = collSuccess;
    (void)collCommGetAsyncError(comm_, &asyncError);
    int failed = 0;
    (void)collCommGetFailedRanks(comm_, nullptr, 0, &failed);
    // A communicator with a failed peer is aborted: destroy would wait for that peer.
    if (asyncError != collSuccess || failed > 0 || collCommDestroy(comm_) != collSuccess) (void)collCommAbort(comm_);
  }
}

void ProcessGroupCollective::workerLoop() {
  for (;;) {
    c10::intrusive_ptr<CollectiveWork> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    if (aborted_.load()) {
      work->fail(std::make_exception_ptr(std::runtime_error("collective backend: the process group was aborted")));
    } else {
      work->run();
    }
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs,
                                                               std::function<void()> body) {
  TORCH_CHECK(!aborted_.load(), "collective backend: the process group was aborted");
  auto work = c10::make_intrusive<CollectiveWork>(getRank(), type, std::move(outputs), std::move(body));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(work);
  }
  queued_.notify_one();
  return work;
}

std::string ProcessGroupCollective::failureText(const char* what, collResult_t result) {
  std::ostringstream message;
  message << "collective backend: " << what << " failed on rank " << getRank();
  if (!globalRanks_.empty()) message << " (global rank " << globalRanks_[getRank()] << ")";
  message << ": " << collGetErrorString(result) << ": " << collGetLastError(comm_);
  std::vector<int64_t> failed = failedRanks();
  if (!failed.empty()) {
    message << " [failed ranks of this group:";
    for (int64_t r : failed) message << ' ' << r;
    message << ']';
  }
  return message.str();
}

void ProcessGroupCollective::runOnStream(const char* what, const std::function<collResult_t(collStream_t)>& issue) {
  collResult_t result = issue(stream_);
  if (result != collSuccess) {
    (void)collHostStreamSynchronize(stream_);  // what was queued before the failing call
  } else {
    result = collHostStreamSynchronize(stream_);
  }
  if (result == collSuccess) return;
  const std::string text = failureText(what, result);  // before anything else can overwrite the error
  renewStream();
  throw std::runtime_error(text);
}

void ProcessGroupCollective::renewStream() {
  // A host stream keeps its first error for good: after a call that failed without breaking the
  // communicator (COLL_CHECK's mismatch), the next calls of the group need a fresh stream.
  collResult_t asyncError = collSuccess;
  if (collCommGetAsyncError(comm_, &asyncError) != collSuccess || asyncError != collSuccess) return;
  collStream_t fresh = nullptr;
  if (collHostStreamCreate(&fresh) != collSuccess) return;
  (void)collHostStreamDestroy(stream_);
  stream_ = fresh;
}

void ProcessGroupCollective::requireMember(int peer, const char* what) const {
  TORCH_CHECK(peer >= 0 && peer < getSize(), "collective backend: ", what, ": rank ", peer,
              " is not a member of this group of ", getSize(), " ranks");
}

// ---- collectives --------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::broadcast(std::vector<at::Tensor>& tensors,
                                                                 const c10d::BroadcastOptions& opts) {
  const at::Tensor& tensor = single(tensors, "broadcast");
  requireMember(static_cast<int>(opts.rootRank), "broadcast root");
  TORCH_CHECK(opts.rootTensor == 0, "collective backend: broadcast: rootTensor must be 0");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, tensors, [this, buffer = Contiguous(tensor), root] {
    runOnStream("broadcast", [&](collStream_t s) {
      return collBroadcast(buffer.data(), buffer.data(), buffer.bytes(), collUint8, root, comm_, s);
    });
    buffer.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::allreduce(std::vector<at::Tensor>& tensors,
                                                                 const c10d::AllreduceOptions& opts) {
  const at::Tensor& tensor = single(tensors, "allreduce");
  const ReductionView view = reductionView(tensor, opts.reduceOp.op_, "allreduce");
  auto op = std::make_shared<LibraryOp>(opts.reduceOp, view, "allreduce");
  return enqueue(c10d::OpType::ALLREDUCE, tensors, [this, buffer = Contiguous(tensor), view, op] {
    runOnStream("allreduce", [&](collStream_t s) {
      return collAllReduce(buffer.data(), buffer.data(), buffer.dense.numel() * view.countPerElement, view.type,
                           op->make(comm_, view.type), comm_, s);
    });
    buffer.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "collective backend: allreduce_coalesced got no tensors");
  for (const auto& t : tensors) {
    requireCpu(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "collective backend: allreduce_coalesced: every tensor must have one dtype, got ",
                dtypeName(tensors[0]), " and ", dtypeName(t));
  }
  const ReductionView view = reductionView(tensors[0], opts.reduceOp.op_, "allreduce_coalesced");
  auto op = std::make_shared<LibraryOp>(opts.reduceOp, view, "allreduce_coalesced");
  // One call for the whole list (a bucket of gradients): flattened, reduced, copied back.
  return enqueue(c10d::OpType::ALLREDUCE_COALESCED, tensors, [this, tensors, view, op] {
    at::Tensor flat = flatten(tensors);
    runOnStream("allreduce_coalesced", [&](collStream_t s) {
      return collAllReduce(flat.data_ptr(), flat.data_ptr(), flat.numel() * view.countPerElement, view.type,
                           op->make(comm_, view.type), comm_, s);
    });
    unflatten(flat, tensors);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::reduce(std::vector<at::Tensor>& tensors,
                                                              const c10d::ReduceOptions& opts) {
  const at::Tensor& tensor = single(tensors, "reduce");
  requireMember(static_cast<int>(opts.rootRank), "reduce root");
  const ReductionView view = reductionView(tensor, opts.reduceOp.op_, "reduce");
  auto op = std::make_shared<LibraryOp>(opts.reduceOp, view, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::REDUCE, tensors, [this, buffer = Contiguous(tensor), view, op, root] {
    runOnStream("reduce", [&](collStream_t s) {
      return collReduce(buffer.data(), buffer.data(), buffer.dense.numel() * view.countPerElement, view.type,
                        op->make(comm_, view.type), root, comm_, s);
    });
    if (getRank() == root) buffer.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::allgather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                                 std::vector<at::Tensor>& inputTensors,
                                                                 const c10d::AllgatherOptions&) {
  const at::Tensor& input = single(inputTensors, "allgather");
  TORCH_CHECK(outputTensors.size() == 1 && static_cast<int>(outputTensors[0].size()) == getSize(),
              "collective backend: allgather needs one list of ", getSize(), " output tensors");
  for (const auto& t : outputTensors[0]) checkSameLayout(input, t, "allgather", "output");
  std::vector<at::Tensor> outputs = outputTensors[0];
  return enqueue(c10d::OpType::ALLGATHER, outputs, [this, in = Contiguous(input), outputs] {
    at::Tensor flat = at::empty({static_cast<int64_t>(getSize()) * in.dense.numel()}, in.dense.options());
    runOnStream("allgather", [&](collStream_t s) {
      return collAllGather(in.data(), flat.data_ptr(), in.bytes(), collUint8, comm_, s);
    });
    unflatten(flat, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::_allgather_base(at::Tensor& outputBuffer,
                                                                       at::Tensor& inputBuffer,
                                                                       const c10d::AllgatherOptions&) {
  checkWholeAndPiece(outputBuffer, inputBuffer, getSize(), "all_gather_into_tensor", "output");
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {outputBuffer},
                 [this, in = Contiguous(inputBuffer), out = Contiguous(outputBuffer)] {
                   runOnStream("all_gather_into_tensor", [&](collStream_t s) {
                     return collAllGather(in.data(), out.data(), in.bytes(), collUint8, comm_, s);
                   });
                   out.writeBack();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists, std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputTensors.empty(), "collective backend: allgather_coalesced got no tensors");
  TORCH_CHECK(static_cast<int>(outputTensorLists.size()) == getSize(), "collective backend: allgather_coalesced needs ",
              getSize(), " output lists, got ", outputTensorLists.size());
  for (const auto& list : outputTensorLists) {
    TORCH_CHECK(list.size() == inputTensors.size(), "collective backend: allgather_coalesced: every output list must ",
                "hold ", inputTensors.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) checkSameLayout(inputTensors[i], list[i], "allgather_coalesced", "output");
  }
  for (const auto& t : inputTensors)
    TORCH_CHECK(t.scalar_type() == inputTensors[0].scalar_type(),
                "collective backend: allgather_coalesced: every tensor must have one dtype");
  std::vector<at::Tensor> outputs;
  for (const auto& list : outputTensorLists) outputs.insert(outputs.end(), list.begin(), list.end());
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, outputs, [this, inputTensors, outputs] {
    at::Tensor flatIn = flatten(inputTensors);
    at::Tensor flatOut = at::empty({flatIn.numel() * getSize()}, flatIn.options());
    runOnStream("allgather_coalesced", [&](collStream_t s) {
      return collAllGather(flatIn.data_ptr(), flatOut.data_ptr(), flatIn.numel() * flatIn.element_size(), collUint8,
                           comm_, s);
    });
    unflatten(flatOut, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::gather(std::vector<std::vector<at::Tensor>>& outputTensors,
                                                              std::vector<at::Tensor>& inputTensors,
                                                              const c10d::GatherOptions& opts) {
  const at::Tensor& input = single(inputTensors, "gather");
  requireMember(static_cast<int>(opts.rootRank), "gather root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outputs = rootList(outputTensors, input, getRank() == root, getSize(), "gather", "output");
  return enqueue(c10d::OpType::GATHER, outputs, [this, in = Contiguous(input), outputs, root] {
    at::Tensor flat;
    if (getRank() == root) flat = at::empty({in.dense.numel() * getSize()}, in.dense.options());
    runOnStream("gather", [&](collStream_t s) {
      return collGather(in.data(), flat.defined() ? flat.data_ptr() : nullptr, in.bytes(), collUint8, root, comm_, s);
    });
    if (flat.defined()) unflatten(flat, outputs);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::scatter(std::vector<at::Tensor>& outputTensors,
                                                               std::vector<std::vector<at::Tensor>>& inputTensors,
                                                               const c10d::ScatterOptions& opts) {
  const at::Tensor& output = single(outputTensors, "scatter");
  requireMember(static_cast<int>(opts.rootRank), "scatter root");
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> inputs = rootList(inputTensors, output, getRank() == root, getSize(), "scatter", "input");
  return enqueue(c10d::OpType::SCATTER, outputTensors, [this, out = Contiguous(output), inputs, root] {
    at::Tensor flat;
    if (!inputs.empty()) flat = flatten(inputs);
    runOnStream("scatter", [&](collStream_t s) {
      return collScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data(), out.bytes(), collUint8, root, comm_,
                         s);
    });
    out.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::reduce_scatter(
    std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& output = single(outputTensors, "reduce_scatter");
  TORCH_CHECK(inputTensors.size() == 1 && static_cast<int>(inputTensors[0].size()) == getSize(),
              "collective backend: reduce_scatter needs one list of ", getSize(), " input tensors");
  for (const auto& t : inputTensors[0]) checkSameLayout(output, t, "reduce_scatter", "input");
  const ReductionView view = reductionView(output, opts.reduceOp.op_, "reduce_scatter");
  auto op = std::make_shared<LibraryOp>(opts.reduceOp, view, "reduce_scatter");
  std::vector<at::Tensor> inputs = inputTensors[0];
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputTensors, [this, out = Contiguous(output), inputs, view, op] {
    at::Tensor flat = flatten(inputs);
    runOnStream("reduce_scatter", [&](collStream_t s) {
      return collReduceScatter(flat.data_ptr(), out.data(), out.dense.numel() * view.countPerElement, view.type,
                               op->make(comm_, view.type), comm_, s);
    });
    out.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::_reduce_scatter_base(at::Tensor& outputBuffer,
                                                                            at::Tensor& inputBuffer,
                                                                            const c10d::ReduceScatterOptions& opts) {
  checkWholeAndPiece(inputBuffer, outputBuffer, getSize(), "reduce_scatter_tensor", "input");
  const ReductionView view = reductionView(outputBuffer, opts.reduceOp.op_, "reduce_scatter_tensor");
  auto op = std::make_shared<LibraryOp>(opts.reduceOp, view, "reduce_scatter_tensor");
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {outputBuffer},
                 [this, in = Contiguous(inputBuffer), out = Contiguous(outputBuffer), view, op] {
                   runOnStream("reduce_scatter_tensor", [&](collStream_t s) {
                     return collReduceScatter(in.data(), out.data(), out.dense.numel() * view.countPerElement,
                                              view.type, op->make(comm_, view.type), comm_, s);
                   });
                   out.writeBack();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::alltoall_base(at::Tensor& outputBuffer, at::Tensor& inputBuffer,
                                                                     std::vector<int64_t>& outputSplitSizes,
                                                                     std::vector<int64_t>& inputSplitSizes,
                                                                     const c10d::AllToAllOptions&) {
  requireCpu(inputBuffer, "all_to_all_single");
  requireCpu(outputBuffer, "all_to_all_single");
  TORCH_CHECK(outputBuffer.scalar_type() == inputBuffer.scalar_type(),
              "collective backend: all_to_all_single: output dtype ", dtypeName(outputBuffer),
              " differs from input dtype ", dtypeName(inputBuffer));
  const int n = getSize();
  // Split sizes count rows of dim 0; none given: equal rows for every rank.
  auto offsets = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* role) {
    const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    const int64_t rowBytes = rows == 0 ? 0 : static_cast<int64_t>(t.numel() * t.element_size()) / rows;
    std::vector<int64_t> sizes(n), starts(n);
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "collective backend: all_to_all_single: the ", role, " has ", rows,
                  " rows, not a multiple of the group size ", n);
      std::fill(sizes.begin(), sizes.end(), rows / n);
    } else {
      TORCH_CHECK(static_cast<int>(splits.size()) == n, "collective backend: all_to_all_single: ", role,
                  " split sizes need ", n, " entries, got ", splits.size());
      int64_t total = 0;
      for (int64_t s : splits) {
        TORCH_CHECK(s >= 0, "collective backend: all_to_all_single: negative split size");
        total += s;
      }
      TORCH_CHECK(total == rows, "collective backend: all_to_all_single: ", role, " split sizes add up to ", total,
                  " rows, the tensor has ", rows);
      sizes = splits;
    }
    int64_t start = 0;
    for (int p = 0; p < n; ++p) {
      starts[p] = start * rowBytes;
      start += sizes[p];
      sizes[p] *= rowBytes;
    }
    return std::make_pair(starts, sizes);  // in bytes
  };
  auto [sendStarts, sendBytes] = offsets(inputBuffer, inputSplitSizes, "input");
  auto [recvStarts, recvBytes] = offsets(outputBuffer, outputSplitSizes, "output");
  const bool uniform = std::all_of(sendBytes.begin(), sendBytes.end(), [&](int64_t b) { return b == sendBytes[0]; }) &&
                       std::all_of(recvBytes.begin(), recvBytes.end(), [&](int64_t b) { return b == sendBytes[0]; });
  return enqueue(c10d::OpType::ALLTOALL_BASE, {outputBuffer},
                 [this, in = Contiguous(inputBuffer), out = Contiguous(outputBuffer), sendStarts = sendStarts,
                  sendBytes = sendBytes, recvStarts = recvStarts, recvBytes = recvBytes, uniform] {
                   auto* src = static_cast<char*>(in.data());
                   auto* dst = static_cast<char*>(out.data());
                   runOnStream("all_to_all_single", [&](collStream_t s) -> collResult_t {
                     if (uniform) return collAlltoAll(src, dst, sendBytes[0], collUint8, comm_, s);
                     // Uneven splits: one group of sends and receives (every peer's in one call).
                     collResult_t r = collGroupStart();
                     for (int p = 0; p < getSize() && r == collSuccess; ++p) {
                       if (sendBytes[p] > 0) r = collSend(src + sendStarts[p], sendBytes[p], collUint8, p, comm_, s);
                       if (r == collSuccess && recvBytes[p] > 0)
                         r = collRecv(dst + recvStarts[p], recvBytes[p], collUint8, p, comm_, s);
                     }
                     const collResult_t end = collGroupEnd();
                     return r != collSuccess ? r : end;
                   });
                   out.writeBack();
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::alltoall(std::vector<at::Tensor>& outputTensors,
                                                                std::vector<at::Tensor>& inputTensors,
                                                                const c10d::AllToAllOptions&) {
  const int n = getSize();
  TORCH_CHECK(static_cast<int>(outputTensors.size()) == n && static_cast<int>(inputTensors.size()) == n,
              "collective backend: all_to_all needs ", n, " input and ", n, " output tensors, got ",
              inputTensors.size(), " and ", outputTensors.size());
  for (int p = 0; p < n; ++p) {
    requireCpu(inputTensors[p], "all_to_all");
    requireCpu(outputTensors[p], "all_to_all");
  }
  std::vector<Contiguous> ins, outs;
  for (int p = 0; p < n; ++p) {
    ins.emplace_back(inputTensors[p]);
    outs.emplace_back(outputTensors[p]);
  }
  return enqueue(c10d::OpType::ALLTOALL, outputTensors, [this, ins, outs] {
    runOnStream("all_to_all", [&](collStream_t s) -> collResult_t {
      collResult_t r = collGroupStart();
      for (int p = 0; p < getSize() && r == collSuccess; ++p) {
        if (ins[p].bytes() > 0) r = collSend(ins[p].data(), ins[p].bytes(), collUint8, p, comm_, s);
        if (r == collSuccess && outs[p].bytes() > 0)
          r = collRecv(outs[p].data(), outs[p].bytes(), collUint8, p, comm_, s);
      }
      const collResult_t end = collGroupEnd();
      return r != collSuccess ? r : end;
    });
    for (const auto& o : outs) o.writeBack();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, {},
                 [this] { runOnStream("barrier", [&](collStream_t s) { return collBarrier(comm_, s); }); });
}

// ---- point to point ------------------------------------------------------------------------
// Messages between two ranks match in the order they were issued (as in NCCL); each carries a
// header with its tag and size, so a receive that meets a message of another tag or size fails
// with both named instead of taking the wrong bytes.

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::pointToPoint(c10d::OpType type, const char* what,
                                                                    std::vector<at::Tensor> tensors, PointToPoint op) {
  TORCH_CHECK(!aborted_.load(), "collective backend: the process group was aborted");
  if (coalescing_) {
    // Completed by endCoalescing's batch.
    op.work = c10::make_intrusive<CollectiveWork>(getRank(), type, tensors, op.finish);
    auto work = op.work;
    coalesced_.push_back(std::move(op));
    return work;
  }
  return enqueue(type, std::move(tensors), [this, what, op = std::move(op)] {
    runOnStream(what, [&](collStream_t s) -> collResult_t {
      collResult_t r = collGroupStart();
      if (r == collSuccess) r = op.issue(s);
      const collResult_t end = collGroupEnd();
      return r != collSuccess ? r : end;
    });
    op.finish();
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  const at::Tensor& tensor = single(tensors, "send");
  requireMember(dstRank, "send destination");
  auto header = std::make_shared<MessageHeader>(MessageHeader{tag, static_cast<int64_t>(tensor.nbytes())});
  Contiguous buffer(tensor);
  PointToPoint op;
  op.issue = [this, header, buffer, dstRank](collStream_t s) {
    collResult_t r = collSend(header.get(), sizeof(MessageHeader), collUint8, dstRank, comm_, s);
    if (r == collSuccess && buffer.bytes() > 0)
      r = collSend(buffer.data(), buffer.bytes(), collUint8, dstRank, comm_, s);
    return r;
  };
  op.finish = [] {};
  return pointToPoint(c10d::OpType::SEND, "send", tensors, std::move(op));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  const at::Tensor& tensor = single(tensors, "recv");
  requireMember(srcRank, "recv source");
  auto header = std::make_shared<MessageHeader>(MessageHeader{-1, -1});
  Contiguous buffer(tensor);
  PointToPoint op;
  op.issue = [this, header, buffer, srcRank](collStream_t s) {
    collResult_t r = collRecv(header.get(), sizeof(MessageHeader), collUint8, srcRank, comm_, s);
    if (r == collSuccess && buffer.bytes() > 0)
      r = collRecv(buffer.data(), buffer.bytes(), collUint8, srcRank, comm_, s);
    return r;
  };
  op.finish = [header, buffer, srcRank, tag] {
    TORCH_CHECK(header->tag == tag && header->bytes == static_cast<int64_t>(buffer.bytes()),
                "collective backend: recv from rank ", srcRank, " with tag ", tag, " of ", buffer.bytes(),
                " bytes met a message sent with tag ", header->tag, " of ", header->bytes,
                " bytes (messages between two ranks match in the order they were sent)");
    buffer.writeBack();
  };
  return pointToPoint(c10d::OpType::RECV, "recv", tensors, std::move(op));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::recvAnysource(std::vector<at::Tensor>&, int) {
  TORCH_CHECK(false, "collective backend: recv from any source is not supported (name the source rank, as with NCCL)");
}

void ProcessGroupCollective::startCoalescing() {
  TORCH_CHECK(!coalescing_, "collective backend: coalescing already started");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::runCoalesced() {
  TORCH_CHECK(coalescing_, "collective backend: endCoalescing without startCoalescing");
  coalescing_ = false;
  std::vector<PointToPoint> batch = std::move(coalesced_);
  coalesced_.clear();
  if (batch.empty()) return {};
  // The Works the calls returned complete with the batch (below).
  return enqueue(c10d::OpType::UNKNOWN, {}, [this, batch] {
    try {
      runOnStream("batch_isend_irecv", [&](collStream_t s) -> collResult_t {
        collResult_t r = collGroupStart();
        for (size_t i = 0; i < batch.size() && r == collSuccess; ++i) r = batch[i].issue(s);
        const collResult_t end = collGroupEnd();
        return r != collSuccess ? r : end;
      });
    } catch (...) {
      for (const auto& op : batch) op.work->fail(std::current_exception());
      throw;
    }
    for (const auto& op : batch) op.work->run();  // each one's check and copy-back
  });
}

// ---- beyond c10d ----------------------------------------------------------------------------

c10::intrusive_ptr<c10d::Work> ProcessGroupCollective::allreduceInt4(at::Tensor& tensor, at::Tensor& residual,
                                                                     int blockSize, bool average, int64_t minBytes) {
  requireCpu(tensor, "allreduce_int4");
  TORCH_CHECK(
      tensor.scalar_type() == at::kFloat || tensor.scalar_type() == at::kHalf || tensor.scalar_type() == at::kBFloat16,
      "collective backend: allreduce_int4 takes float32, float16 or bfloat16, got ", dtypeName(tensor));
  TORCH_CHECK(tensor.is_contiguous(), "collective backend: allreduce_int4 needs a contiguous tensor");
  if (residual.defined()) {
    requireCpu(residual, "allreduce_int4");
    TORCH_CHECK(residual.scalar_type() == at::kFloat && residual.is_contiguous() && residual.numel() == tensor.numel(),
                "collective backend: allreduce_int4: the residual must be a contiguous float32 tensor of ",
                tensor.numel(), " elements");
  }
  const collDataType_t type = tensor.scalar_type() == at::kFloat  ? collFloat32
                              : tensor.scalar_type() == at::kHalf ? collFloat16
                                                                  : collBfloat16;
  return enqueue(c10d::OpType::ALLREDUCE, {tensor}, [this, tensor, residual, type, blockSize, average, minBytes] {
    collCompression_t cfg = COLL_COMPRESSION_INITIALIZER;
    cfg.blockSize = blockSize;
    cfg.minBytes = static_cast<size_t>(minBytes);
    runOnStream("allreduce_int4", [&](collStream_t s) {
      return collAllReduceCompressed(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type,
                                     average ? collAvg : collSum, &cfg,
                                     residual.defined() ? residual.data_ptr() : nullptr, comm_, s);
    });
  });
}

c10::intrusive_ptr<ProcessGroupCollective> ProcessGroupCollective::wrapNewComm(collComm_t comm) {
  int rank = 0, size = 0;
  (void)collCommUserRank(comm, &rank);
  (void)collCommCount(comm, &size);
  return c10::make_intrusive<ProcessGroupCollective>(comm, rank, size, timeout_, std::vector<int64_t>{});
}

c10::intrusive_ptr<ProcessGroupCollective> ProcessGroupCollective::shrink(const std::vector<int64_t>& excludeRanks) {
  std::vector<int> exclude;
  for (int64_t r : excludeRanks) {
    requireMember(static_cast<int>(r), "shrink");
    exclude.push_back(static_cast<int>(r));
  }
  // The worker may be inside a call that waits for a dead peer: shrink works beside it.
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::min<int64_t>(timeout_.count(), INT32_MAX));
  collComm_t newComm = nullptr;
  const collResult_t r = collCommShrink(comm_, exclude.data(), static_cast<int>(exclude.size()), &newComm, &config);
  if (r != collSuccess) throw std::runtime_error(failureText("shrink", r));
  return wrapNewComm(newComm);
}

c10::intrusive_ptr<ProcessGroupCollective> ProcessGroupCollective::split(int color, int key) {
  collConfig_t config = COLL_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::min<int64_t>(timeout_.count(), INT32_MAX));
  collComm_t newComm = nullptr;
  // Collective over this group: queued work first, then the split on the caller's thread.
  auto fence = barrier();
  fence->wait();
  const collResult_t r = collCommSplit(comm_, color, key, &newComm, &config);
  if (r != collSuccess) throw std::runtime_error(failureText("split", r));
  if (newComm == nullptr) return {};
  return wrapNewComm(newComm);
}

void ProcessGroupCollective::abortGroup() {
  if (aborted_.exchange(true)) return;
  (void)collCommAbort(comm_);  // the worker's wait returns with an error; queued work fails
}

std::vector<int64_t> ProcessGroupCollective::failedRanks() {
  int count = 0;
  if (collCommGetFailedRanks(comm_, nullptr, 0, &count) != collSuccess || count <= 0) return {};
  std::vector<int> ranks(count);
  (void)collCommGetFailedRanks(comm_, ranks.data(), count, &count);
  return std::vector<int64_t>(ranks.begin(), ranks.begin() + std::min<size_t>(count, ranks.size()));
}

}  // namespace torch_collective
