"""An HF-style trainer: a Trainer class with TrainingArguments, a compute_loss helper, an LR scheduler and
callbacks; the loop lives in a library-like module, the script only configures it.

Planted problem: a hidden sync inside the loss helper: boolean-mask indexing `logits[mask]` (chapter 06).
"""

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


@dataclass
class TrainingArguments:
    per_device_train_batch_size: int = 16
    learning_rate: float = 3e-4
    num_train_epochs: int = 2
    logging_steps: int = 1000


class Trainer:
    def __init__(self, model, args, train_dataset, callbacks=()):
        self.model, self.args, self.train_dataset, self.callbacks = model, args, train_dataset, list(callbacks)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1.0)
        self.global_step = 0

    def get_train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=self.args.per_device_train_batch_size, shuffle=True)

    def compute_loss(self, model, inputs):
        logits = model(inputs["input_ids"])
        mask = inputs["labels"] != -100
        return nn.functional.cross_entropy(logits[mask], inputs["labels"][mask])  # PLANTED: hidden sync

    def training_step(self, model, inputs):
        model.train()
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

    def train(self):
        for _ in range(self.args.num_train_epochs):
            for input_ids, labels in self.get_train_dataloader():
                loss = self.training_step(self.model, {"input_ids": input_ids, "labels": labels})
                self.optimizer.step()
                self.lr_scheduler.step()
                self.optimizer.zero_grad()
                self.global_step += 1
                for callback in self.callbacks:
                    callback(self.global_step, loss)


def main():
    torch.manual_seed(0)
    labels = torch.randint(0, 8, (512,))
    labels[::3] = -100  # padding, ignored by the loss
    data = TensorDataset(torch.randn(512, 48), labels)
    model = nn.Sequential(nn.Linear(48, 128), nn.GELU(), nn.Linear(128, 8))
    trainer = Trainer(model, TrainingArguments(), data, callbacks=[lambda step, loss: None])
    trainer.train()


if __name__ == "__main__":
    main()
