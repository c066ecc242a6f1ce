// torch_collective._C: the Python side of the "collective" backend. The process group is returned
// as PyTorch's own ProcessGroup type (its methods dispatch to ours); what c10d has no method for
// (the compressed All-Reduce, shrink, split, abort) is a function taking the group.
#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/python.h>

#include "bindings/torch/process_group_collective.h"

namespace py = pybind11;
using torch_collective::ProcessGroupCollective;

namespace {

ProcessGroupCollective& ours(const c10::intrusive_ptr<torch_collective::BackendBase>& pg) {
  auto* group = dynamic_cast<ProcessGroupCollective*>(pg.get());
  TORCH_CHECK(group != nullptr, "torch_collective: this process group is not a \"collective\" one (it is \"",
              pg ? pg->getBackendName() : std::string("None"), "\")");
  return *group;
}

c10::intrusive_ptr<torch_collective::BackendBase> asBase(c10::intrusive_ptr<ProcessGroupCollective> pg) { return pg; }

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "libcollective's torch.distributed backend";
  ProcessGroupCollective::outsideInterpreterLock = [](const std::function<void()>& wait) {
    if (PyGILState_Check()) {
      py::gil_scoped_release unlocked;
      wait();
    } else {
      wait();
    }
  };
  m.def(
      "create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
         std::vector<int64_t> globalRanks) {
        return asBase(ProcessGroupCollective::create(store, rank, size, timeout, std::move(globalRanks)));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("global_ranks") = std::vector<int64_t>{}, py::call_guard<py::gil_scoped_release>());
  m.def(
      "allreduce_int4",
      [](const c10::intrusive_ptr<torch_collective::BackendBase>& pg, at::Tensor tensor,
         c10::optional<at::Tensor> residual, int blockSize, bool average, int64_t minBytes) {
        at::Tensor r = residual.has_value() ? *residual : at::Tensor();
        return ours(pg).allreduceInt4(tensor, r, blockSize, average, minBytes);
      },
      py::arg("group"), py::arg("tensor"), py::arg("residual"), py::arg("block_size") = 64, py::arg("average") = false,
      py::arg("min_bytes") = 0, py::call_guard<py::gil_scoped_release>());
  m.def(
      "shrink",
      [](const c10::intrusive_ptr<torch_collective::BackendBase>& pg, std::vector<int64_t> exclude) {
        return asBase(ours(pg).shrink(exclude));
      },
      py::arg("group"), py::arg("exclude_ranks"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "split",
      [](const c10::intrusive_ptr<torch_collective::BackendBase>& pg, int color, int key) {
        return asBase(ours(pg).split(color, key));
      },
      py::arg("group"), py::arg("color"), py::arg("key"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "abort", [](const c10::intrusive_ptr<torch_collective::BackendBase>& pg) { ours(pg).abortGroup(); },
      py::arg("group"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "failed_ranks",
      [](const c10::intrusive_ptr<torch_collective::BackendBase>& pg) { return ours(pg).failedRanks(); },
      py::arg("group"));
  m.def("library_version", [] {
    int v = 0;
    (void)collGetVersion(&v);
    return v;
  });
  m.attr("SPLIT_NOCOLOR") = COLL_SPLIT_NOCOLOR;
}
