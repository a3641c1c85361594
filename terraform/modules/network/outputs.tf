output "vpc_id" {
  description = "Id of the VPC."
  value       = aws_vpc.this.id
}

output "public_subnet_ids" {
  description = "Ids of the two public subnets, in two availability zones (the node runs in the first)."
  value       = aws_subnet.public[*].id
}
